// Package mempressure measures a node's memory the way admission needs it:
// how much the kernel could give new work without swapping (MemAvailable of
// /proc/meminfo) and whether tasks already stall on memory (PSI,
// /proc/pressure/memory). A Monitor turns the readings into a pressure
// verdict with hysteresis, so a node near its threshold does not flap
// between admitting and refusing with every heartbeat.
//
// Pressure turns ON when either holds:
//
//	MemAvailable < Threshold% of MemTotal
//	PSI "some" avg10 >= PSIThreshold, while MemAvailable < PSIMemoryShare% of MemTotal
//
// PSI is the whole host's: it counts a task stalled reclaiming inside its
// own cgroup's limit (a sandbox at its memory.max, a big copy in a small
// group) as much as one stalled because the host is short. With half of
// the host's memory available the host is not short, so stalls then say
// nothing about room for new work: a node whose memory is plentiful was
// refusing every create while one sandbox thrashed against its own limit
// (CI, 2026-12-07: "psi some avg10=25.24" with 22 of 24 GiB available).
//
// and OFF only when both hold:
//
//	MemAvailable >= 2 × Threshold% of MemTotal
//	PSI "some" avg10 < PSIThreshold / 2
//
// A kernel without PSI (no /proc/pressure/memory: CONFIG_PSI off, or
// psi=0 on the command line) is measured on MemAvailable alone; the
// Reading says so.
package mempressure

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/failpoint"
)

// Meminfo is what admission reads of /proc/meminfo, in KiB.
type Meminfo struct {
	TotalKiB     uint64
	AvailableKiB uint64
}

// maxMeminfo bounds the input ParseMeminfo reads (the real file is ~1.5 KiB).
const maxMeminfo = 64 << 10

// ParseMeminfo parses the text of /proc/meminfo. Every line must be
// "Name: value" or "Name: value kB" with a decimal value; MemTotal and
// MemAvailable (kernel 3.14 and later) must each appear once, and
// MemAvailable may not exceed MemTotal.
func ParseMeminfo(b []byte) (Meminfo, error) {
	if len(b) > maxMeminfo {
		return Meminfo{}, fmt.Errorf("%w: meminfo: %d bytes, more than %d", errdefs.ErrInvalidArgument, len(b), maxMeminfo)
	}
	var m Meminfo
	var haveTotal, haveAvail bool
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return Meminfo{}, fmt.Errorf("%w: meminfo line %d: %q is not \"Name: value [kB]\"", errdefs.ErrInvalidArgument, i+1, clip(line))
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 || len(fields) > 2 || len(fields) == 2 && fields[1] != "kB" || !strings.HasPrefix(rest, " ") {
			return Meminfo{}, fmt.Errorf("%w: meminfo line %d: %q is not \"Name: value [kB]\"", errdefs.ErrInvalidArgument, i+1, clip(line))
		}
		v, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return Meminfo{}, fmt.Errorf("%w: meminfo line %d: %s: value %q is not a decimal number", errdefs.ErrInvalidArgument, i+1, clip(name), clip(fields[0]))
		}
		var seen *bool
		switch name {
		case "MemTotal":
			m.TotalKiB, seen = v, &haveTotal
		case "MemAvailable":
			m.AvailableKiB, seen = v, &haveAvail
		default:
			continue
		}
		if len(fields) != 2 {
			return Meminfo{}, fmt.Errorf("%w: meminfo line %d: %s has no kB unit", errdefs.ErrInvalidArgument, i+1, name)
		}
		if *seen {
			return Meminfo{}, fmt.Errorf("%w: meminfo line %d: %s appears twice", errdefs.ErrInvalidArgument, i+1, name)
		}
		*seen = true
	}
	switch {
	case !haveTotal:
		return Meminfo{}, fmt.Errorf("%w: meminfo: no MemTotal line", errdefs.ErrInvalidArgument)
	case !haveAvail:
		return Meminfo{}, fmt.Errorf("%w: meminfo: no MemAvailable line (kernel older than 3.14?)", errdefs.ErrInvalidArgument)
	case m.TotalKiB == 0:
		return Meminfo{}, fmt.Errorf("%w: meminfo: MemTotal is 0", errdefs.ErrInvalidArgument)
	case m.AvailableKiB > m.TotalKiB:
		return Meminfo{}, fmt.Errorf("%w: meminfo: MemAvailable %d kB exceeds MemTotal %d kB", errdefs.ErrInvalidArgument, m.AvailableKiB, m.TotalKiB)
	}
	return m, nil
}

// PSILine is one line of a PSI file: the share of wall time (percent) in
// which some (or all, "full") non-idle tasks stalled on the resource, over
// the last 10, 60 and 300 seconds, and the total stall in microseconds.
type PSILine struct {
	Avg10, Avg60, Avg300 float64
	TotalMicros          uint64
}

// PSI is /proc/pressure/memory.
type PSI struct {
	Some PSILine
	// Full is the zero line when the file has no "full" line.
	Full    PSILine
	HasFull bool
}

// maxPSI bounds the input ParsePSI reads (the real file is ~110 bytes).
const maxPSI = 4 << 10

// ParsePSI parses the text of a PSI file: a "some" line, then optionally a
// "full" line, each "KIND avg10=A avg60=A avg300=A total=T" with every
// average a decimal in [0, 100] and T a decimal count.
func ParsePSI(b []byte) (PSI, error) {
	if len(b) > maxPSI {
		return PSI{}, fmt.Errorf("%w: psi: %d bytes, more than %d", errdefs.ErrInvalidArgument, len(b), maxPSI)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) > 2 || lines[0] == "" {
		return PSI{}, fmt.Errorf("%w: psi: want a \"some\" line and at most a \"full\" line, got %d line(s)", errdefs.ErrInvalidArgument, len(lines))
	}
	var p PSI
	for i, line := range lines {
		kind, rest, _ := strings.Cut(line, " ")
		want := "some"
		if i == 1 {
			want = "full"
		}
		if kind != want {
			return PSI{}, fmt.Errorf("%w: psi line %d: starts %q, want %q", errdefs.ErrInvalidArgument, i+1, clip(kind), want)
		}
		l, err := parsePSILine(rest)
		if err != nil {
			return PSI{}, fmt.Errorf("%w: psi line %d (%s): %v", errdefs.ErrInvalidArgument, i+1, want, err)
		}
		if i == 0 {
			p.Some = l
		} else {
			p.Full, p.HasFull = l, true
		}
	}
	return p, nil
}

// parsePSILine parses "avg10=A avg60=A avg300=A total=T".
func parsePSILine(s string) (PSILine, error) {
	fields := strings.Split(s, " ")
	keys := []string{"avg10", "avg60", "avg300", "total"}
	if len(fields) != len(keys) {
		return PSILine{}, fmt.Errorf("%q: want avg10=A avg60=A avg300=A total=T", clip(s))
	}
	var l PSILine
	avgs := []*float64{&l.Avg10, &l.Avg60, &l.Avg300}
	for i, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k != keys[i] {
			return PSILine{}, fmt.Errorf("field %d is %q, want %s=...", i+1, clip(f), keys[i])
		}
		if i == 3 {
			t, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return PSILine{}, fmt.Errorf("total %q is not a decimal count", clip(v))
			}
			l.TotalMicros = t
			continue
		}
		// The kernel writes %lu.%02lu: digits, a dot, digits. Refuse
		// what ParseFloat alone would take (inf, nan, 1e3, +5, 0x1p3).
		if !decimal(v) {
			return PSILine{}, fmt.Errorf("%s %q is not a decimal like 12.34", k, clip(v))
		}
		a, err := strconv.ParseFloat(v, 64)
		if err != nil || a < 0 || a > 100 {
			return PSILine{}, fmt.Errorf("%s %q is not a percentage from 0 to 100", k, clip(v))
		}
		*avgs[i] = a
	}
	return l, nil
}

// decimal reports whether s is digits, optionally a dot and digits.
func decimal(s string) bool {
	whole, frac, dot := strings.Cut(s, ".")
	return whole != "" && allDigits(whole) && (!dot || frac != "" && allDigits(frac))
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return len(s) <= 20
}

// clip cuts s for an error message.
func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// Defaults of a Monitor.
const (
	// DefaultThreshold is the share of MemTotal (percent) below which
	// MemAvailable means pressure.
	DefaultThreshold = 10.0
	// DefaultPSIThreshold is the PSI "some" avg10 (percent of the last
	// 10 s in which some task stalled on memory) that means pressure.
	DefaultPSIThreshold = 20.0
	// PSIMemoryShare is the share of MemTotal (percent) of MemAvailable
	// from which PSI no longer counts (the package comment says why).
	PSIMemoryShare = 50.0
)

// Default paths of the files a Monitor reads.
const (
	MeminfoPath = "/proc/meminfo"
	PSIPath     = "/proc/pressure/memory"
)

// Reading is one measure of a node's memory.
type Reading struct {
	// Measured is false when meminfo could not be read (Err says why):
	// then nothing else is set and admission goes by the committed sum.
	Measured               bool
	Err                    error
	TotalMiB, AvailableMiB int
	// PSI is false on a kernel without PSI: the verdict is then
	// MemAvailable's alone.
	PSI     bool
	PSISome float64
	// Pressure is non-empty while the node is under memory pressure
	// and says why.
	Pressure string
}

// Monitor measures memory and keeps the pressure verdict between
// measures (the hysteresis). Its zero value is not usable: see New.
type Monitor struct {
	meminfo, psi string
	threshold    float64
	psiThreshold float64
	// override, when set, is a file whose content forces the verdict
	// (test only: see TestOverrideEnv).
	override string

	mu sync.Mutex // guards on
	// on is the verdict of the last measure.
	on bool
}

// Config configures a Monitor; zero fields take the defaults.
type Config struct {
	// Threshold is DefaultThreshold's percentage (0: the default).
	Threshold float64
	// PSIThreshold is DefaultPSIThreshold's (0: the default).
	PSIThreshold float64
	// MeminfoPath and PSIPath override the /proc files (tests).
	MeminfoPath, PSIPath string
	// OverrideFile, when set, names a file whose content, when non-empty,
	// is reported as the pressure reason instead of the measured verdict
	// (the figures are still measured); empty or absent, the measure
	// decides. Test only: see TestOverrideEnv.
	OverrideFile string
}

// New returns a Monitor for cfg, or an error for a threshold out of range.
func New(cfg Config) (*Monitor, error) {
	if cfg.Threshold == 0 {
		cfg.Threshold = DefaultThreshold
	}
	if cfg.PSIThreshold == 0 {
		cfg.PSIThreshold = DefaultPSIThreshold
	}
	if !(cfg.Threshold > 0 && cfg.Threshold < 50) { // NaN too
		return nil, fmt.Errorf("%w: memory pressure threshold %v%%: want more than 0 and less than 50 (pressure ends at twice it)", errdefs.ErrInvalidArgument, cfg.Threshold)
	}
	if !(cfg.PSIThreshold > 0 && cfg.PSIThreshold <= 100) {
		return nil, fmt.Errorf("%w: memory PSI threshold %v: want more than 0, at most 100", errdefs.ErrInvalidArgument, cfg.PSIThreshold)
	}
	if cfg.MeminfoPath == "" {
		cfg.MeminfoPath = MeminfoPath
	}
	if cfg.PSIPath == "" {
		cfg.PSIPath = PSIPath
	}
	return &Monitor{meminfo: cfg.MeminfoPath, psi: cfg.PSIPath, threshold: cfg.Threshold, psiThreshold: cfg.PSIThreshold, override: cfg.OverrideFile}, nil
}

// Threshold is the monitor's MemAvailable threshold in percent.
func (m *Monitor) Threshold() float64 { return m.threshold }

// HasPSI reports whether the kernel offers memory PSI.
func (m *Monitor) HasPSI() bool {
	_, err := os.Stat(m.psi)
	return err == nil
}

// Measure reads the files once and returns the reading with the verdict.
func (m *Monitor) Measure() Reading {
	b, err := os.ReadFile(m.meminfo)
	if err != nil {
		return Reading{Err: fmt.Errorf("memory: %w", err)}
	}
	mi, err := ParseMeminfo(b)
	if err != nil {
		return Reading{Err: fmt.Errorf("memory: %s: %w", m.meminfo, err)}
	}
	r := Reading{Measured: true, TotalMiB: int(mi.TotalKiB >> 10), AvailableMiB: int(mi.AvailableKiB >> 10)}
	b, err = os.ReadFile(m.psi)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// No PSI in this kernel: MemAvailable alone decides.
	case err != nil:
		return Reading{Err: fmt.Errorf("memory: %w", err)}
	default:
		p, err := ParsePSI(b)
		if err != nil {
			return Reading{Err: fmt.Errorf("memory: %s: %w", m.psi, err)}
		}
		r.PSI, r.PSISome = true, p.Some.Avg10
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.on, r.Pressure = verdict(m.on, mi, r.PSI, r.PSISome, m.threshold, m.psiThreshold)
	if m.override != "" {
		if b, err := os.ReadFile(m.override); err == nil {
			if reason := strings.TrimSpace(string(bytes.ToValidUTF8(b, nil))); reason != "" {
				r.Pressure = "test override: " + clip(reason)
			}
		}
	}
	return r
}

// verdict is the pressure verdict of one measure given the last one (on),
// and its reason.
func verdict(on bool, mi Meminfo, hasPSI bool, some, threshold, psiThreshold float64) (bool, string) {
	share := 100 * float64(mi.AvailableKiB) / float64(mi.TotalKiB)
	low := share < threshold
	short := share < PSIMemoryShare
	stalled := hasPSI && short && some >= psiThreshold
	if on {
		// Stay on until both have cleared with margin.
		low = share < 2*threshold
		stalled = hasPSI && short && some >= psiThreshold/2
	}
	var why []string
	if low {
		bound := threshold
		if on {
			bound = 2 * threshold
		}
		why = append(why, fmt.Sprintf("MemAvailable %d MiB of %s (%.1f%%) below %g%%", mi.AvailableKiB>>10, mib(mi.TotalKiB>>10), share, bound))
	}
	if stalled {
		bound := psiThreshold
		if on {
			bound = psiThreshold / 2
		}
		why = append(why, fmt.Sprintf("psi some avg10=%.2f at or above %g", some, bound))
	}
	if len(why) == 0 {
		return false, ""
	}
	return true, strings.Join(why, "; ")
}

// mib renders n MiB as MiB or, from 1 GiB, GiB.
func mib(n uint64) string {
	if n >= 1024 {
		return fmt.Sprintf("%.1f GiB", float64(n)/1024)
	}
	return fmt.Sprintf("%d MiB", n)
}

// TestOverrideEnv names a file whose content, when non-empty, a node
// reports as its memory pressure reason (Config.OverrideFile): the e2e
// tests cannot exhaust a shared machine's memory. It is honoured only in a
// process whose environment also sets failpoint.EnvVar (SPACE_FAILPOINTS,
// even empty): a test process. Never set it outside tests.
const TestOverrideEnv = "SPACE_TEST_MEMORY_PRESSURE"

// OverrideFromEnvironment is the override file of TestOverrideEnv, or ""
// when it is unset or the process is not a test process (failpoint.EnvVar
// unset).
func OverrideFromEnvironment() string {
	if !failpoint.TestProcess() {
		return ""
	}
	return os.Getenv(TestOverrideEnv)
}
