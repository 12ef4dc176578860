package e2bapi

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// storedSandbox opens a SQLite store in a temporary directory with one
// sandbox in it.
func storedSandbox(t *testing.T) (*sqlite.Store, string) {
	st, ids := storedSandboxes(t, 1)
	return st, ids[0]
}

// storedSandboxes opens a SQLite store in a temporary directory with n
// sandboxes in it.
func storedSandboxes(t *testing.T, n int) (*sqlite.Store, []string) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "acme", CreatedAt: time.Now()}
	if err := st.CreateTenant(t.Context(), tn); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range n {
		sb := sandbox.New(tn.ID, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 128, DiskMiB: 512}, time.Now())
		if err := st.CreateSandbox(t.Context(), sb); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	return st, ids
}

// TestMetricsHistoryStore: a flush writes the series; a new history on the
// same store (a restarted server, another replica) serves it before any
// sample of its own, and once it samples the sandbox goes on from it
// (merging as one history would have); a flush with nothing new writes
// nothing; a failed flush is written by the next one.
func TestMetricsHistoryStore(t *testing.T) {
	st, id := storedSandbox(t)
	t0 := time.Unix(1_800_000_000, 0)
	h := newMetricsHistory(5*time.Second, 10)
	h.store = st
	for i := range 8 {
		h.observe(id, "e1", reading(t0, float64(5*i), float64(i)))
	}
	want := h.window(id, 0, math.MaxInt64)
	if err := h.flush(t.Context()); err != nil {
		t.Fatalf("flush: %v", err)
	}

	again := newMetricsHistory(5*time.Second, 10)
	again.store = st
	got, err := again.read(t.Context(), id, 0, math.MaxInt64)
	if err != nil || !sameMetrics(got, want) {
		t.Fatalf("read after a restart = %+v, %v; want the flushed %+v", got, err, want)
	}
	if w, _ := again.read(t.Context(), id, want[1].TimestampUnix, want[2].TimestampUnix); !sameMetrics(w, want[1:3]) {
		t.Errorf("read of a window after a restart = %+v, want %+v", w, want[1:3])
	}
	// ref is the history of a server that never restarted.
	ref := newMetricsHistory(5*time.Second, 10)
	for i := range 30 {
		exec := "e1"
		if i >= 8 {
			exec = "e2"
		}
		ref.observe(id, exec, reading(t0, float64(5*i), float64(i)))
	}
	// A read that fails leaves the sandbox unsampled (no series to write
	// over the stored one) and is tried again.
	dead, cancel := context.WithCancel(t.Context())
	cancel()
	if failed := again.load(dead, []string{id}); !failed[id] || again.all[id] != nil {
		t.Fatalf("load with a failing read: failed %v, series %v; want the sandbox failed and no series", failed, again.all[id])
	}
	if failed := again.load(t.Context(), []string{id}); len(failed) != 0 {
		t.Fatalf("load: failed %v", failed)
	}
	for i := 8; i < 30; i++ { // past the bound: the loaded samples merge
		again.observe(id, "e2", reading(t0, float64(5*i), float64(i)))
	}
	cont := again.window(id, 0, math.MaxInt64)
	if w := ref.window(id, 0, math.MaxInt64); !sameMetrics(cont, w) {
		t.Errorf("after a restart and 22 more readings: %+v, want what a server that never restarted holds, %+v", cont, w)
	}

	if err := again.flush(t.Context()); err != nil {
		t.Fatalf("flush after a restart: %v", err)
	}
	ser, err := st.GetMetricSeries(t.Context(), id)
	if err != nil || len(ser.Samples) != len(cont) {
		t.Fatalf("stored series after the second flush: %d samples, %v; want %d", len(ser.Samples), err, len(cont))
	}

	// Nothing new: nothing written (the row keeps its time).
	if err := again.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s2, _ := st.GetMetricSeries(t.Context(), id); !s2.UpdatedAt.Equal(ser.UpdatedAt) {
		t.Errorf("a flush with no new sample rewrote the series (%v, was %v)", s2.UpdatedAt, ser.UpdatedAt)
	}

	// A failed flush (a cancelled context) is written by the next one.
	again.observe(id, "e2", reading(t0, 150, 30))
	if err := again.flush(dead); err == nil {
		t.Fatal("flush with a cancelled context: no error")
	}
	if err := again.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s3, _ := st.GetMetricSeries(t.Context(), id); sameMetrics(metricsOf(s3.Samples), cont) {
		t.Error("the sample of a failed flush was not written by the next")
	}

	// Deleting the sandbox deletes its series.
	if err := st.DeleteSandbox(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetMetricSeries(t.Context(), id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("series of a deleted sandbox: %v, want not found", err)
	}
}

// sameMetrics compares what the API serves of two series (the stored
// times are UTC).
func sameMetrics(a, b []Metric) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !x.Timestamp.Equal(y.Timestamp) {
			return false
		}
		x.Timestamp, y.Timestamp = time.Time{}, time.Time{}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// TestMetricsHistoryFlushBatches: a flush of more series than a
// transaction takes writes every one of them.
func TestMetricsHistoryFlushBatches(t *testing.T) {
	st, ids := storedSandboxes(t, 2*metricsFlushBatch+5)
	t0 := time.Unix(1_800_000_000, 0)
	h := newMetricsHistory(5*time.Second, 10)
	h.store = st
	for _, id := range ids {
		h.observe(id, "e1", reading(t0, 0, 0))
		h.observe(id, "e1", reading(t0, 5, 1))
	}
	if err := h.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if ser, err := st.GetMetricSeries(t.Context(), id); err != nil || len(ser.Samples) != 1 {
			t.Fatalf("sandbox %s after a flush of %d series: %d samples, %v; want 1", id, len(ids), len(ser.Samples), err)
		}
	}
}
