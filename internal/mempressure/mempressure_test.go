package mempressure

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/failpoint"
)

const realMeminfo = `MemTotal:       24683772 kB
MemFree:        21685680 kB
MemAvailable:   23858704 kB
Buffers:          123456 kB
Active(anon):      12345 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
`

func TestParseMeminfo(t *testing.T) {
	m, err := ParseMeminfo([]byte(realMeminfo))
	if err != nil || m.TotalKiB != 24683772 || m.AvailableKiB != 23858704 {
		t.Fatalf("ParseMeminfo(real) = %+v, %v", m, err)
	}
	bad := []struct{ name, in, want string }{
		{"empty", "", "is not \"Name: value [kB]\""},
		{"no total", "MemAvailable: 5 kB\n", "no MemTotal"},
		{"no available", "MemTotal: 5 kB\n", "no MemAvailable"},
		{"twice", "MemTotal: 5 kB\nMemTotal: 6 kB\nMemAvailable: 1 kB\n", "MemTotal appears twice"},
		{"not a number", "MemTotal: five kB\nMemAvailable: 1 kB\n", "not a decimal number"},
		{"negative", "MemTotal: -5 kB\nMemAvailable: 1 kB\n", "not a decimal number"},
		{"no unit", "MemTotal: 5\nMemAvailable: 1 kB\n", "MemTotal has no kB unit"},
		{"wrong unit", "MemTotal: 5 MB\nMemAvailable: 1 kB\n", "is not \"Name: value [kB]\""},
		{"no colon", "MemTotal 5 kB\nMemAvailable: 1 kB\n", "is not \"Name: value [kB]\""},
		{"garbage line", "MemTotal: 5 kB\nMemAvailable: 1 kB\nhello\n", "line 3"},
		{"more than total", "MemTotal: 5 kB\nMemAvailable: 6 kB\n", "exceeds MemTotal"},
		{"zero total", "MemTotal: 0 kB\nMemAvailable: 0 kB\n", "MemTotal is 0"},
		{"blank line", "MemTotal: 5 kB\n\nMemAvailable: 1 kB\n", "line 2"},
		{"huge", strings.Repeat("A: 1 kB\n", 10000), "more than"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseMeminfo([]byte(c.in))
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ParseMeminfo(%q) = %v, want InvalidArgument containing %q", c.in, err, c.want)
			}
		})
	}
}

func TestParsePSI(t *testing.T) {
	p, err := ParsePSI([]byte("some avg10=35.00 avg60=1.50 avg300=0.02 total=123456\nfull avg10=3.10 avg60=0.00 avg300=0.00 total=99\n"))
	if err != nil || p.Some.Avg10 != 35 || p.Some.Avg60 != 1.5 || p.Some.TotalMicros != 123456 || !p.HasFull || p.Full.Avg10 != 3.1 {
		t.Fatalf("ParsePSI = %+v, %v", p, err)
	}
	if p, err := ParsePSI([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")); err != nil || p.HasFull {
		t.Fatalf("ParsePSI(some only) = %+v, %v", p, err)
	}
	bad := []struct{ name, in, want string }{
		{"empty", "", "got 1 line"},
		{"full first", "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", "want \"some\""},
		{"three lines", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", "got 3 line"},
		{"two some", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nsome avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", "want \"full\""},
		{"missing field", "some avg10=0.00 avg60=0.00 total=0\n", "want avg10=A"},
		{"out of order", "some avg60=0.00 avg10=0.00 avg300=0.00 total=0\n", "want avg10="},
		{"over 100", "some avg10=100.01 avg60=0.00 avg300=0.00 total=0\n", "percentage from 0 to 100"},
		{"nan", "some avg10=NaN avg60=0.00 avg300=0.00 total=0\n", "not a decimal"},
		{"inf", "some avg10=Inf avg60=0.00 avg300=0.00 total=0\n", "not a decimal"},
		{"exponent", "some avg10=1e1 avg60=0.00 avg300=0.00 total=0\n", "not a decimal"},
		{"sign", "some avg10=+1.00 avg60=0.00 avg300=0.00 total=0\n", "not a decimal"},
		{"negative", "some avg10=-1.00 avg60=0.00 avg300=0.00 total=0\n", "not a decimal"},
		{"bad total", "some avg10=0.00 avg60=0.00 avg300=0.00 total=x\n", "not a decimal count"},
		{"double space", "some  avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", "want avg10=A"},
		{"trailing dot", "some avg10=1. avg60=0.00 avg300=0.00 total=0\n", "not a decimal"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParsePSI([]byte(c.in))
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ParsePSI(%q) = %v, want InvalidArgument containing %q", c.in, err, c.want)
			}
		})
	}
}

// writeFiles writes a meminfo with avail of total MiB and, unless psi is
// negative, a PSI file with some avg10 = psi.
func writeFiles(t *testing.T, dir string, availMiB, totalMiB int, psi float64) {
	t.Helper()
	mi := "MemTotal: " + strconv.Itoa(totalMiB*1024) + " kB\nMemFree: 1 kB\nMemAvailable: " + strconv.Itoa(availMiB*1024) + " kB\n"
	if err := os.WriteFile(filepath.Join(dir, "meminfo"), []byte(mi), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "psi")
	if psi < 0 {
		os.Remove(path)
		return
	}
	line := "some avg10=" + strconv.FormatFloat(psi, 'f', 2, 64) + " avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestMonitorHysteresis(t *testing.T) {
	dir := t.TempDir()
	m, err := New(Config{MeminfoPath: filepath.Join(dir, "meminfo"), PSIPath: filepath.Join(dir, "psi")})
	if err != nil {
		t.Fatal(err)
	}
	// total 10000 MiB, threshold 10%: on below 1000, off from 2000;
	// PSI on at 20, off below 10.
	steps := []struct {
		avail int
		psi   float64
		want  string // "" for no pressure; else a substring of the reason
	}{
		{5000, 0, ""},
		{1500, 0, ""}, // between T and 2T, was off: stays off
		{900, 0, "MemAvailable 900 MiB of 9.8 GiB (9.0%) below 10%"},
		{1500, 0, "below 20%"}, // between T and 2T, was on: stays on
		{2000, 0, ""},          // at 2T: off
		{4000, 20, "psi some avg10=20.00 at or above 20"},
		{4000, 12, "psi some avg10=12.00 at or above 10"}, // on until below half
		{4000, 9.99, ""},
		{4000, 19.99, ""},
		// Half the host's memory or more available: stalls are tasks
		// reclaiming within their own cgroups' limits, not the node short.
		{5000, 60, ""},
		{9000, 100, ""},
		{500, 50, "below 10%; psi some avg10=50.00"},
		{2500, 15, "psi some avg10=15.00"}, // memory cleared, PSI not: still on
		{2500, 5, ""},
	}
	for i, s := range steps {
		writeFiles(t, dir, s.avail, 10000, s.psi)
		r := m.Measure()
		if !r.Measured || r.TotalMiB != 10000 || r.AvailableMiB != s.avail || !r.PSI {
			t.Fatalf("step %d: reading %+v", i, r)
		}
		if s.want == "" && r.Pressure != "" || s.want != "" && !strings.Contains(r.Pressure, s.want) {
			t.Fatalf("step %d (%d MiB, psi %v): pressure %q, want %q", i, s.avail, s.psi, r.Pressure, s.want)
		}
	}
}

func TestMonitorWithoutPSI(t *testing.T) {
	dir := t.TempDir()
	m, err := New(Config{MeminfoPath: filepath.Join(dir, "meminfo"), PSIPath: filepath.Join(dir, "psi"), Threshold: 25})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, 3000, 4000, -1)
	if r := m.Measure(); !r.Measured || r.PSI || r.Pressure != "" || m.HasPSI() {
		t.Fatalf("no PSI, plenty free: %+v", r)
	}
	writeFiles(t, dir, 900, 4000, -1)
	if r := m.Measure(); r.PSI || !strings.Contains(r.Pressure, "MemAvailable 900 MiB of 3.9 GiB (22.5%) below 25%") {
		t.Fatalf("no PSI, low: %+v", r)
	}
}

func TestMonitorUnreadable(t *testing.T) {
	dir := t.TempDir()
	m, _ := New(Config{MeminfoPath: filepath.Join(dir, "meminfo"), PSIPath: filepath.Join(dir, "psi")})
	if r := m.Measure(); r.Measured || r.Err == nil {
		t.Fatalf("no meminfo: %+v", r)
	}
	os.WriteFile(filepath.Join(dir, "meminfo"), []byte("garbage\n"), 0o600)
	if r := m.Measure(); r.Measured || r.Err == nil || !strings.Contains(r.Err.Error(), "meminfo line 1") {
		t.Fatalf("garbage meminfo: %+v", r)
	}
	writeFiles(t, dir, 10, 100, 0)
	os.WriteFile(filepath.Join(dir, "psi"), []byte("some avg10=x\n"), 0o600)
	if r := m.Measure(); r.Measured || r.Err == nil || !strings.Contains(r.Err.Error(), "psi line 1") {
		t.Fatalf("garbage psi: %+v", r)
	}
}

func TestMonitorOnTheRealMachine(t *testing.T) {
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := m.Measure()
	if !r.Measured || r.TotalMiB <= 0 || r.AvailableMiB <= 0 || r.AvailableMiB > r.TotalMiB {
		t.Fatalf("this machine: %+v", r)
	}
	if r.PSI != m.HasPSI() {
		t.Fatalf("PSI %v but HasPSI %v", r.PSI, m.HasPSI())
	}
	t.Logf("this machine: %d of %d MiB available, psi %v (some avg10 %.2f), pressure %q", r.AvailableMiB, r.TotalMiB, r.PSI, r.PSISome, r.Pressure)
}

func TestNewRejectsThresholds(t *testing.T) {
	for _, c := range []Config{{Threshold: -1}, {Threshold: 50}, {Threshold: 80}, {PSIThreshold: -3}, {PSIThreshold: 101}} {
		if _, err := New(c); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("New(%+v) = %v, want InvalidArgument", c, err)
		}
	}
}

func TestOverride(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, 5000, 10000, 0)
	over := filepath.Join(dir, "over")
	m, _ := New(Config{MeminfoPath: filepath.Join(dir, "meminfo"), PSIPath: filepath.Join(dir, "psi"), OverrideFile: over})
	if r := m.Measure(); r.Pressure != "" {
		t.Fatalf("no override file: %+v", r)
	}
	os.WriteFile(over, []byte("injected\n"), 0o600)
	if r := m.Measure(); r.Pressure != "test override: injected" || r.AvailableMiB != 5000 {
		t.Fatalf("override: %+v", r)
	}
	os.WriteFile(over, nil, 0o600)
	if r := m.Measure(); r.Pressure != "" {
		t.Fatalf("empty override: %+v", r)
	}
}

func TestOverrideOnlyInTestProcesses(t *testing.T) {
	t.Setenv(TestOverrideEnv, "/some/file")
	t.Setenv(failpoint.EnvVar, "")
	if got := OverrideFromEnvironment(); got != "/some/file" {
		t.Fatalf("with %s set: override %q", failpoint.EnvVar, got)
	}
	os.Unsetenv(failpoint.EnvVar) // t.Setenv restores it at the end
	if got := OverrideFromEnvironment(); got != "" {
		t.Fatalf("without %s: override %q, want it ignored", failpoint.EnvVar, got)
	}
}

// BenchmarkMeasure: what a node pays per heartbeat to measure its memory
// on this machine (reads /proc/meminfo and /proc/pressure/memory).
func BenchmarkMeasure(b *testing.B) {
	m, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if r := m.Measure(); !r.Measured {
			b.Fatal(r.Err)
		}
	}
}
