package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// TestMetricsHistoryRestart: the samples GET /v1/sandboxes/{id}/metrics
// served before a restart of the server (SIGTERM, as an operator's) are
// served after it on the same data dir, read from the store; deleting the
// sandbox deletes its stored series.
func TestMetricsHistoryRestart(t *testing.T) {
	dir := t.TempDir()
	in := startServer(t, dir)
	var sb struct {
		ID string `json:"id"`
	}
	if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 256}, &sb); code != http.StatusCreated {
		t.Fatalf("create: HTTP %d\n%s", code, in.logs())
	}
	in.settle(sb.ID, "create")
	type metric struct {
		Time        time.Time `json:"time"`
		CPUUsedPct  float64   `json:"cpu_used_pct"`
		MemUsed     uint64    `json:"mem_used_bytes"`
		SpanSeconds float64   `json:"span_seconds"`
	}
	history := func(in *instance, end int64) []metric {
		t.Helper()
		var list struct {
			Metrics []metric `json:"metrics"`
		}
		if code := in.do("GET", fmt.Sprintf("/v1/sandboxes/%s/metrics?end=%d", sb.ID, end), nil, &list); code != http.StatusOK {
			t.Fatalf("GET metrics: HTTP %d\n%s", code, in.logs())
		}
		return list.Metrics
	}
	// The history samples every 5 s; the window ends before now, so no
	// sample taken at the request is among them.
	var before []metric
	deadline := time.Now().Add(2 * time.Minute)
	for len(before) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no two history samples in 2 minutes: %+v\n%s", before, in.logs())
		}
		time.Sleep(time.Second)
		before = history(in, time.Now().Unix()-1)
	}
	stopped := before[len(before)-1].Time.Unix()
	before = history(in, stopped)
	in.stop()

	in = startServer(t, dir)
	after := history(in, stopped)
	if len(after) != len(before) {
		t.Fatalf("after a restart: %d samples up to %d, want the %d served before: %+v, want %+v", len(after), stopped, len(before), after, before)
	}
	for i := range before {
		if !after[i].Time.Equal(before[i].Time) || after[i] != (metric{Time: after[i].Time, CPUUsedPct: before[i].CPUUsedPct, MemUsed: before[i].MemUsed, SpanSeconds: before[i].SpanSeconds}) {
			t.Errorf("sample %d after a restart %+v, before %+v", i, after[i], before[i])
		}
	}

	st, err := sqlite.Open(t.Context(), filepath.Join(dir, "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.GetMetricSeries(t.Context(), sb.ID); err != nil {
		t.Fatalf("stored series before the delete: %v", err)
	}
	if code := in.do("DELETE", "/v1/sandboxes/"+sb.ID, nil, nil); code/100 != 2 {
		t.Fatalf("delete: HTTP %d", code)
	}
	deadline = time.Now().Add(2 * time.Minute)
	for {
		_, err := st.GetMetricSeries(t.Context(), sb.ID)
		if errors.Is(err, errdefs.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("2 minutes after the delete the stored series is still there (%v)\n%s", err, in.logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
	in.stop()
}
