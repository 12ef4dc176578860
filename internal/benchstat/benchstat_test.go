package benchstat

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func ms2d(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"n=1 p50", ms2d(7), 50, 7 * time.Millisecond},
		{"n=1 p99", ms2d(7), 99, 7 * time.Millisecond},
		{"n=1 max", ms2d(7), 100, 7 * time.Millisecond},
		{"n=2 p50 is the lower", ms2d(1, 2), 50, 1 * time.Millisecond},
		{"n=2 p90", ms2d(1, 2), 90, 2 * time.Millisecond},
		// ceil(0.5*5) = 3rd, ceil(0.9*5) = 5th.
		{"n=5 p50", ms2d(10, 20, 30, 40, 50), 50, 30 * time.Millisecond},
		{"n=5 p90", ms2d(10, 20, 30, 40, 50), 90, 50 * time.Millisecond},
		{"n=100 p50", ms2d(hundred...), 50, 50 * time.Millisecond},
		{"n=100 p90", ms2d(hundred...), 90, 90 * time.Millisecond},
		{"n=100 p99", ms2d(hundred...), 99, 99 * time.Millisecond},
		{"n=100 max", ms2d(hundred...), 100, 100 * time.Millisecond},
		{"ties", ms2d(5, 5, 5, 5, 9), 50, 5 * time.Millisecond},
		{"ties at the top", ms2d(1, 9, 9, 9, 9), 90, 9 * time.Millisecond},
		{"tiny p is rank 1", ms2d(3, 4), 0.0001, 3 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarizeUnsortedInputAndThroughput(t *testing.T) {
	in := ms2d(40, 10, 30, 20)
	s := Summarize(in, 2*time.Second, MiB)
	if s.N != 4 || s.P50 != 20*time.Millisecond || s.P90 != 40*time.Millisecond || s.Max != 40*time.Millisecond {
		t.Errorf("Summarize = %+v, want n=4 p50=20ms p90=40ms max=40ms", s)
	}
	if s.OpsPerSec != 2 || s.MiBPerSec != 2 {
		t.Errorf("ops/s %v, MiB/s %v; want 2 and 2", s.OpsPerSec, s.MiBPerSec)
	}
	if in[0] != 40*time.Millisecond {
		t.Errorf("Summarize sorted its input in place: %v", in)
	}
	if z := Summarize(ms2d(1), 0, 0); z.OpsPerSec != 0 || z.N != 1 {
		t.Errorf("zero wall time: %+v, want n=1 and no rate", z)
	}
}

func TestReportJSONShape(t *testing.T) {
	r := Report{Machine: Machine{CPUs: 2, MemoryMiB: 4096, Kernel: "6.1.0", GoVersion: "go1.26"}}
	r.Add("create", Summarize(ms2d(1500, 1250), time.Second, 0))
	r.Add("files_write_1mib", Summarize(ms2d(4), 4*time.Millisecond, MiB))
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Machine   map[string]any            `json:"machine"`
		Scenarios map[string]map[string]any `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	for _, k := range []string{"cpus", "memory_mib", "kernel", "go_version"} {
		if _, ok := got.Machine[k]; !ok {
			t.Errorf("machine lacks %q: %s", k, b)
		}
	}
	if len(got.Scenarios) != 2 {
		t.Fatalf("scenarios = %v, want create and files_write_1mib", got.Scenarios)
	}
	c := got.Scenarios["create"]
	for _, k := range []string{"p50_ms", "p90_ms", "p99_ms", "max_ms", "ops_per_s", "n"} {
		if _, ok := c[k]; !ok {
			t.Errorf("create lacks %q: %s", k, b)
		}
	}
	if c["p50_ms"] != 1250.0 || c["max_ms"] != 1500.0 || c["n"] != 2.0 || c["ops_per_s"] != 2.0 {
		t.Errorf("create = %v, want p50 1250, max 1500, n 2, ops/s 2", c)
	}
	if _, ok := c["mib_per_s"]; ok {
		t.Errorf("create has mib_per_s though it moves no data: %v", c)
	}
	if w := got.Scenarios["files_write_1mib"]; w["mib_per_s"] != 250.0 || w["p99_ms"] != 4.0 {
		t.Errorf("files_write_1mib = %v, want mib_per_s 250 and p99 4", w)
	}
}

func TestReportTable(t *testing.T) {
	var r Report
	r.Add("exec", Summarize(ms2d(2, 3), 10*time.Millisecond, 0))
	r.Add("files_read_1mib", Summarize(ms2d(8), 8*time.Millisecond, MiB).WithCPU(30*time.Millisecond))
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("table = %q, want a header and two rows", buf.String())
	}
	if got := strings.Join(strings.Fields(lines[0]), " "); got != "SCENARIO N P50 MS P90 MS P99 MS MAX MS OPS/S MIB/S CPU MS/OP" {
		t.Errorf("header = %q", got)
	}
	if got := strings.Join(strings.Fields(lines[1]), " "); got != "exec 2 2.0 3.0 3.0 3.0 200.00 - -" {
		t.Errorf("exec row = %q", got)
	}
	if got := strings.Join(strings.Fields(lines[2]), " "); got != "files_read_1mib 1 8.0 8.0 8.0 8.0 125.00 125.0 30.0" {
		t.Errorf("files row = %q", got)
	}
}

func TestReportRatiosTableAndJSON(t *testing.T) {
	var r Report
	r.Add("create", Summarize(ms2d(300, 300, 900), time.Second, 0).WithCPU(600*time.Millisecond))
	r.Add("exec", Summarize(ms2d(20), time.Second, 0))
	r.Add("unshare_chroot_spawn", Summarize(ms2d(100, 100), time.Second, 0).WithCPU(100*time.Millisecond))
	r.Add("qemu_cold_boot", Summarize(ms2d(0), time.Second, 0))
	r.CPU = "the whole machine's"
	if !r.Compare("create", "unshare_chroot_spawn") {
		t.Fatal("Compare(create, unshare_chroot_spawn) = false with both rows present")
	}
	if r.Compare("exec", "unshare_chroot_spawn") != true || r.Ratios[1].CPU != 0 {
		t.Errorf("exec without CPU: ratios %+v, want a p50 ratio and no CPU ratio", r.Ratios)
	}
	if r.Compare("create", "qemu_snapshot_restore") || r.Compare("create", "qemu_cold_boot") {
		t.Errorf("a missing baseline or one of p50 0 gave a ratio: %+v", r.Ratios)
	}
	// create: p50 300 / 100; CPU per op 200 ms (600 over 3) / 50 ms (100 over 2).
	if got := r.Ratios[0].String(); got != "create / unshare_chroot_spawn: p50 ×3.00, CPU/op ×4.00" {
		t.Errorf("ratio text = %q", got)
	}
	if got := r.Ratios[1].String(); got != "exec / unshare_chroot_spawn: p50 ×0.20, CPU/op not measured" {
		t.Errorf("ratio text = %q", got)
	}
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CPU MS/OP: the whole machine's\n", "ratio create / unshare_chroot_spawn: p50 ×3.00, CPU/op ×4.00\n"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Scenarios map[string]map[string]any `json:"scenarios"`
		CPU       string                    `json:"cpu"`
		Ratios    map[string]map[string]any `json:"ratios"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Scenarios["create"]["cpu_ms_per_op"] != 200.0 {
		t.Errorf("create cpu_ms_per_op = %v, want 200: %s", got.Scenarios["create"]["cpu_ms_per_op"], b)
	}
	if _, ok := got.Scenarios["exec"]["cpu_ms_per_op"]; ok {
		t.Errorf("exec has cpu_ms_per_op though not measured: %s", b)
	}
	if ra := got.Ratios["create/unshare_chroot_spawn"]; ra["p50"] != 3.0 || ra["cpu"] != 4.0 {
		t.Errorf("ratio = %v, want p50 3 and cpu 4: %s", ra, b)
	}
	if _, ok := got.Ratios["exec/unshare_chroot_spawn"]["cpu"]; ok || got.CPU == "" {
		t.Errorf("JSON = %s, want no cpu ratio for exec and the cpu remark", b)
	}
}

func TestParseMemTotalMiB(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"MemTotal:        8039424 kB\nMemFree: 1 kB\n", 7851},
		{"MemFree: 1 kB\nMemTotal: 2048 kB\n", 2},
		{"MemTotal: lots kB\n", 0},
		{"MemTotal: 2048 MB\n", 0},
		{"MemTotal: -2048 kB\n", 0},
		{"", 0},
	}
	for _, tt := range tests {
		if got := ParseMemTotalMiB([]byte(tt.in)); got != tt.want {
			t.Errorf("ParseMemTotalMiB(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestReadMachine(t *testing.T) {
	m := ReadMachine()
	if m.CPUs < 1 || !strings.HasPrefix(m.GoVersion, "go") {
		t.Errorf("ReadMachine = %+v, want at least one CPU and a Go version", m)
	}
}

func FuzzParseMemTotalMiB(f *testing.F) {
	f.Add([]byte("MemTotal:        8039424 kB\n"))
	f.Add([]byte("MemTotal: 99999999999999999999 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got := ParseMemTotalMiB(b); got < 0 {
			t.Fatalf("ParseMemTotalMiB(%q) = %d", b, got)
		}
	})
}

func FuzzCleanKernel(f *testing.F) {
	f.Add("6.1.0-28-amd64\n")
	f.Add("\x1b[2J\xff")
	f.Fuzz(func(t *testing.T, s string) {
		got := cleanKernel(s)
		if len(got) > 3*128 {
			t.Fatalf("cleanKernel kept %d bytes", len(got))
		}
		for _, r := range got {
			if r < 0x20 || r == 0x7f {
				t.Fatalf("cleanKernel(%q) kept %U", s, r)
			}
		}
	})
}
