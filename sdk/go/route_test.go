package space

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// TestRefreshRouteRetry: a refresh_route answer is retried once for a read
// and for a request with an Idempotency-Key, never for an exec without one,
// and no other 503 is retried.
func TestRefreshRouteRetry(t *testing.T) {
	var gets, execs, snaps, others atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		if gets.Add(1) == 1 {
			writeErr(w, http.StatusServiceUnavailable, sandboxv1.CodeRefreshRoute, "moved")
			return
		}
		writeJSON(w, http.StatusOK, sandboxv1.Sandbox{ID: r.PathValue("id"), State: "running"})
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		execs.Add(1)
		writeErr(w, http.StatusServiceUnavailable, sandboxv1.CodeRefreshRoute, "moved")
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/snapshots", func(w http.ResponseWriter, r *http.Request) {
		if snaps.Add(1) == 1 {
			writeErr(w, http.StatusServiceUnavailable, sandboxv1.CodeRefreshRoute, "moved")
			return
		}
		writeJSON(w, http.StatusCreated, sandboxv1.Snapshot{ID: "sn-1", Kind: "disk"})
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		others.Add(1)
		writeErr(w, http.StatusServiceUnavailable, sandboxv1.CodeUnavailable, "busy")
	})
	c := newTestServer(t, mux)
	ctx := context.Background()
	if sb, err := c.GetSandbox(ctx, "sb1"); err != nil || sb.ID != "sb1" || gets.Load() != 2 {
		t.Errorf("GetSandbox = %+v, %v after %d requests; want a success on the one retry", sb, err, gets.Load())
	}
	if _, err := c.Exec(ctx, "sb1", sandboxv1.ExecRequest{Cmd: []string{"true"}}); !IsCode(err, sandboxv1.CodeRefreshRoute) || execs.Load() != 1 {
		t.Errorf("Exec = %v after %d requests; want the refresh_route error and no replay", err, execs.Load())
	}
	if snap, err := c.CreateSnapshot(ctx, "sb1", sandboxv1.CreateSnapshotRequest{Kind: "disk"}, IdempotencyKey("k1")); err != nil || snap.ID != "sn-1" || snaps.Load() != 2 {
		t.Errorf("CreateSnapshot with a key = %+v, %v after %d requests; want one retry", snap, err, snaps.Load())
	}
	if err := c.DeleteSandbox(ctx, "sb1"); err == nil || others.Load() != 1 {
		t.Errorf("DeleteSandbox on a plain 503 = %v after %d requests; want no retry", err, others.Load())
	}
}
