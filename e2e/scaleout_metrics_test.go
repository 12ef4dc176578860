package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestScaleOutMetricsHistory: a replica started after another one wrote a
// sandbox's metrics history to PostgreSQL serves that history, sample for
// sample, before it took a sample of its own.
func TestScaleOutMetricsHistory(t *testing.T) {
	c := startCluster(t, 1, 1)
	sb := c.mustCreate(256)
	type metric struct {
		Time        time.Time `json:"time"`
		CPUUsedPct  float64   `json:"cpu_used_pct"`
		MemUsed     uint64    `json:"mem_used_bytes"`
		SpanSeconds float64   `json:"span_seconds"`
	}
	history := func(base string, end int64) []metric {
		t.Helper()
		var list struct {
			Metrics []metric `json:"metrics"`
		}
		if code := tryDo(base, c.api.key, "GET", fmt.Sprintf("/v1/sandboxes/%s/metrics?end=%d", sb.ID, end), nil, &list, nil); code != http.StatusOK {
			t.Fatalf("GET metrics on %s: HTTP %d", base, code)
		}
		return list.Metrics
	}
	// Replica 0 writes the series within a minute of its first sample.
	db, err := pgx.Connect(t.Context(), c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(t.Context())
	var stored int
	var written int64
	deadline := time.Now().Add(3 * time.Minute)
	for stored == 0 {
		if time.Now().After(deadline) {
			t.Fatal("replica 0 wrote no metrics series in 3 minutes")
		}
		time.Sleep(2 * time.Second)
		_ = db.QueryRow(t.Context(), `SELECT length(samples), updated_at FROM sandbox_metrics WHERE sandbox_id = $1`, sb.ID).Scan(&stored, &written)
	}
	// The samples up to the write (replica 1's own are later), as replica
	// 0 serves them.
	end := time.Unix(0, written).Unix() - 1
	mine := history(c.replicaURL(0), end)
	c.replicas = append(c.replicas, nil)
	c.startReplica(1)
	theirs := history(c.replicaURL(1), end)
	if len(theirs) == 0 || len(theirs) != len(mine) {
		t.Fatalf("replica 1 serves %d samples, replica 0 %d: want replica 0's stored ones", len(theirs), len(mine))
	}
	for i := range theirs {
		if !theirs[i].Time.Equal(mine[i].Time) || theirs[i].CPUUsedPct != mine[i].CPUUsedPct || theirs[i].MemUsed != mine[i].MemUsed || theirs[i].SpanSeconds != mine[i].SpanSeconds {
			t.Errorf("sample %d: replica 1 %+v, replica 0 %+v", i, theirs[i], mine[i])
		}
	}
	t.Logf("replica 1 serves %d of replica 0's %d samples (%d bytes stored)", len(theirs), len(mine), stored)
	c.api.delete(sb.ID)
}
