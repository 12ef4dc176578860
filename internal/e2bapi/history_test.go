package e2bapi

import (
	"math"
	"runtime"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
)

// reading is an execution's counters at t0+sec seconds, its CPU time
// cpuSec seconds.
func reading(t0 time.Time, sec, cpuSec float64) *nodev1.ExecStats {
	return &nodev1.ExecStats{
		Time: t0.Add(time.Duration(sec * float64(time.Second))), CPUs: 1, CPUNanos: uint64(cpuSec * 1e9),
		MemoryBytes: 100 << 20, MemoryLimitBytes: 256 << 20, DiskBytes: 10 << 20, DiskLimitBytes: 2048 << 20,
	}
}

func TestMetricsHistorySamples(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	h := newMetricsHistory(5*time.Second, 100)
	h.observe("sb", "e1", reading(t0, 0, 0))   // starts the interval
	h.observe("sb", "e1", reading(t0, 2, 1))   // too early: no sample
	h.observe("sb", "e1", reading(t0, 5, 2.5)) // 2.5 s of CPU in 5 s: 50 %
	h.observe("sb", "e1", reading(t0, 10, 2.5))
	got := h.window("sb", 0, math.MaxInt64)
	if len(got) != 2 || got[0].CPUUsedPct != 50 || got[1].CPUUsedPct != 0 || got[0].TimestampUnix != t0.Unix()+5 {
		t.Fatalf("samples %+v, want 50%% at +5 s and 0%% at +10 s", got)
	}
	if m := got[0]; m.MemUsed != 100<<20 || m.MemTotal != 256<<20 || m.DiskUsed == nil || *m.DiskUsed != 10<<20 || *m.DiskTotal != 2048<<20 {
		t.Errorf("sample %+v: memory or disk not the node's", m)
	}
	// A new execution (resumed, restored) restarts the counters: its first
	// reading only starts an interval, and no sample reads a negative CPU
	// time.
	h.observe("sb", "e2", reading(t0, 15, 0.1))
	h.observe("sb", "e2", reading(t0, 20, 1.1))
	got = h.window("sb", 0, math.MaxInt64)
	if len(got) != 3 || got[2].CPUUsedPct != 20 {
		t.Fatalf("after a new execution: %+v, want a third sample at 20%%", got)
	}
	// The window is of whole seconds, both included.
	if w := h.window("sb", t0.Unix()+10, t0.Unix()+20); len(w) != 2 || w[0].TimestampUnix != t0.Unix()+10 {
		t.Errorf("window +10..+20 s: %+v", w)
	}
	if w := h.window("sb", t0.Unix()+10, t0.Unix()+10); len(w) != 1 {
		t.Errorf("window of second +10: %+v", w)
	}
	if w := h.window("sb", t0.Unix()+21, math.MaxInt64); len(w) != 0 {
		t.Errorf("window after the last sample: %+v", w)
	}
	if w := h.window("other", 0, math.MaxInt64); w != nil {
		t.Errorf("unknown sandbox: %+v", w)
	}
	h.forget("sb")
	if w := h.window("sb", 0, math.MaxInt64); w != nil {
		t.Errorf("forgotten sandbox: %+v", w)
	}
}

// A series never holds more than its bound: past it, neighbours merge (CPU
// averaged over the time), the newest samples stay 5 s apart, and the whole
// life stays covered.
func TestMetricsHistoryBounded(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	const keep = 64
	h := newMetricsHistory(5*time.Second, keep)
	cpu := 0.0
	for i := 0; i <= 400; i++ { // 2000 s
		// 100 % in even intervals, 0 % in odd ones.
		if i > 0 && i%2 == 1 {
			cpu += 5
		}
		h.observe("sb", "e", reading(t0, float64(5*i), cpu))
		if n := len(h.window("sb", 0, math.MaxInt64)); n > keep {
			t.Fatalf("after %d readings: %d samples, bound %d", i, n, keep)
		}
	}
	got := h.window("sb", 0, math.MaxInt64)
	// 400 samples at 4 a level: levels 0 to 6, 3 or 4 samples each.
	if len(got) < 20 {
		t.Fatalf("%d samples, want at least 20", len(got))
	}
	// The oldest sample still lies in the first quarter of the life, the
	// newest is the last reading's, and the newest samples are 5 s apart.
	first, last := got[0].Timestamp, got[len(got)-1].Timestamp
	if first.After(t0.Add(500*time.Second)) || !last.Equal(t0.Add(2000*time.Second)) {
		t.Errorf("samples from %v to %v of a life from %v to %v", first, last, t0, t0.Add(2000*time.Second))
	}
	if d := last.Sub(got[len(got)-2].Timestamp); d != 5*time.Second {
		t.Errorf("the newest samples are %v apart, want 5s", d)
	}
	// Merging keeps the CPU time the series accounts: half the time at
	// 100 %.
	var cpuTime, wall float64
	for _, m := range got {
		cpuTime += m.CPUUsedPct / 100 * m.span.Seconds()
		wall += m.span.Seconds()
	}
	if wall != 2000 || cpuTime < 995 || cpuTime > 1005 {
		t.Errorf("series covers %v s with %v s of CPU, want 2000 s with 1000 s", wall, cpuTime)
	}
}

func TestMetricsHistoryStale(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	h := newMetricsHistory(5*time.Second, 10)
	h.observe("run", "e", reading(t0, 0, 0))
	h.observe("gone", "e", reading(t0, 0, 0))
	if s := h.stale(map[string]bool{"run": true}, t0.Add(30*time.Second)); len(s) != 0 {
		t.Errorf("stale after 30 s: %v, want none yet", s)
	}
	if s := h.stale(map[string]bool{"run": true}, t0.Add(61*time.Second)); len(s) != 1 || s[0] != "gone" {
		t.Errorf("stale after 61 s: %v, want [gone]", s)
	}
	if s := h.stale(map[string]bool{"run": true}, t0.Add(62*time.Second)); len(s) != 0 {
		t.Errorf("stale again at once: %v, want none (looked up a second ago)", s)
	}
}

func FuzzMetricsHistory(f *testing.F) {
	f.Add(uint8(3), []byte{5, 5, 0, 10, 255, 1})
	f.Fuzz(func(t *testing.T, keep uint8, steps []byte) {
		h := newMetricsHistory(5*time.Second, int(keep))
		t0 := time.Unix(1_800_000_000, 0)
		sec, cpu := 0.0, 0.0
		for i, b := range steps {
			sec += float64(b % 16)
			cpu += float64(b>>4) / 4
			exec := "e"
			if b == 255 {
				exec = "f"
			}
			h.observe("sb", exec, reading(t0, sec, cpu))
			got := h.window("sb", 0, math.MaxInt64)
			if len(got) > max(int(keep), 2) {
				t.Fatalf("step %d: %d samples, bound %d", i, len(got), keep)
			}
			for j, m := range got {
				if m.CPUUsedPct < 0 || m.CPUUsedPct > 100 || j > 0 && m.Timestamp.Before(got[j-1].Timestamp) {
					t.Fatalf("step %d: sample %d %+v out of order or range", i, j, m)
				}
			}
		}
	})
}

// BenchmarkMetricsHistoryObserve is the control plane's cost of one sample
// of one sandbox (the node's Stats call aside), on a full series; it
// reports the heap a full series holds.
func BenchmarkMetricsHistoryObserve(b *testing.B) {
	t0 := time.Unix(1_800_000_000, 0)
	h := newMetricsHistory(MetricsEvery, MetricsKeep)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < 20_000; i++ {
		h.observe("sb", "e", reading(t0, float64(5*i), float64(i)))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	n := len(h.window("sb", 0, math.MaxInt64))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.observe("sb", "e", reading(t0, float64(5*(20_000+i)), float64(i)))
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/1024, "KiB/series")
	b.ReportMetric(float64(n), "samples/series")
}
