package reconcile

import (
	"log/slog"
	"testing"
	"time"
)

// TestWatchDoesNotWaitForObservations: a create's Watch, its notification
// and its Stop take the watchers' lock only, never r.mu, which a pass holds
// while it copies a node's observation: a burst of creates does not queue
// behind passes.
func TestWatchDoesNotWaitForObservations(t *testing.T) {
	r := New(Config{}, openStore(t), nil, slog.New(slog.NewTextHandler(t.Output(), nil)))
	r.mu.Lock()
	defer r.mu.Unlock()
	done := make(chan bool)
	go func() {
		w := r.Watch("sb-1")
		r.notify("sb-1")
		_, got := <-w.C
		w.Stop()
		done <- got
	}()
	select {
	case got := <-done:
		if !got {
			t.Fatal("the watch was not notified")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch, notify or Stop waited for r.mu")
	}
}
