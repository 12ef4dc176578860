package reconcile

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/scheduler"
	"github.com/spacesandbox/space/internal/store"
)

// lossHarness is a harness whose n1 went silent a minute ago while n2
// heartbeats, with a reconciler that declares a node lost after 10 s and
// has listened long enough to do so. (Not less: n2's heartbeat must stay
// fresh through the test's setup on a busy machine, under -race.)
func lossHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	cfg.NodeLostAfter = 10 * time.Second
	h := newHarness(t, cfg, true)
	h.r.started = time.Now().Add(-time.Hour)
	h.putNode("n1", time.Now().Add(-time.Minute))
	h.putNode("n2", time.Now())
	return h
}

// wantNodeState fails unless node id is in state.
func (h *harness) wantNodeState(id string, state store.NodeState) {
	h.t.Helper()
	n, err := h.st.GetNode(h.ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	if n.State != state {
		h.t.Fatalf("node %s is %s, want %s", id, n.State, state)
	}
}

func TestLostNodeSandboxRecoveredElsewhereFromObjectStorage(t *testing.T) {
	t.Parallel()
	for _, state := range []sandbox.State{sandbox.StateRunning, sandbox.StatePaused} {
		t.Run(string(state), func(t *testing.T) {
			t.Parallel()
			h := lossHarness(t, Config{})
			sb := h.newSandbox(state, "vm", nil)
			// A snapshot in object storage (a hibernation restored on n1
			// earlier), and a newer one only on n1, out of reach now.
			durable := h.snapshot(sb, func(s *store.Snapshot) {
				s.Kind, s.Tier, s.Artifacts = store.SnapshotFull, "hibernate", `{"objects":[]}`
				s.CreatedAt = time.Now().Add(-time.Hour).UTC()
			})
			h.snapshot(sb, func(s *store.Snapshot) { s.Kind, s.Tier = store.SnapshotFull, "auto" })
			h.observe("n1", exec(sb, nodev1.ExecRunning))

			h.r.resync(h.ctx)
			h.wantNodeState("n1", store.NodeDown)
			h.mustPass(sb.ID)
			got := h.wantState(sb.ID, sandbox.StateRecovering, sandbox.StateRunning)
			if got.Node != "n2" || got.StartFrom != durable.ID || got.Generation != sb.Generation+1 || got.ExecID == sb.ExecID {
				t.Fatalf("recovering on %s from %s generation %d exec %s; want n2, %s, generation %d, a new exec",
					got.Node, got.StartFrom, got.Generation, got.ExecID, durable.ID, sb.Generation+1)
			}
			h.wantEvent(sb.ID, "recovering", "node n1 lost")
			h.wantEvent(sb.ID, "recovering", "in object storage")

			h.mustPass(sb.ID)
			got = h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
			if got.Node != "n2" {
				t.Fatalf("running on %s, want n2", got.Node)
			}
			wantCalls(t, h.nodes["n2"], "Download("+durable.ID+")", "Start("+got.ExecID+")")
			// Nothing was asked of the lost node, whose stale report still
			// lists the old execution.
			h.r.resync(h.ctx)
			wantCalls(t, h.nodes["n1"])

			// Back, the node still runs the old execution: it is stopped.
			h.putNode("n1", time.Now())
			h.r.resync(h.ctx)
			wantCalls(t, h.nodes["n1"], "Stop("+sb.ExecID+")")
		})
	}
}

func TestLostNodeWithoutADurableSnapshotFailsTheSandbox(t *testing.T) {
	t.Parallel()
	h := lossHarness(t, Config{})
	sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
	h.snapshot(sb, nil) // on n1 only
	h.observe("n1", exec(sb, nodev1.ExecRunning))
	h.r.resync(h.ctx)
	h.mustPass(sb.ID)
	got := h.wantState(sb.ID, sandbox.StateFailed, sandbox.StateFailed)
	wantReason(t, got, "node n1 lost; no snapshot in object storage")
	h.wantEvent(sb.ID, "failed", "node n1 lost")
	// The failed sandbox's execution is not chased on the lost node.
	h.mustPass(sb.ID)
	wantCalls(t, h.nodes["n1"])

	// The node comes back: what it still runs of the sandbox is stopped.
	h.putNode("n1", time.Now())
	h.mustPass(sb.ID)
	wantCalls(t, h.nodes["n1"], "Stop("+sb.ExecID+")")
}

func TestNodeLossIsNotDeclaredEarly(t *testing.T) {
	t.Parallel()
	t.Run("a node heard from recently", func(t *testing.T) {
		t.Parallel()
		h := lossHarness(t, Config{})
		h.putNode("n1", time.Now())
		h.r.resync(h.ctx)
		h.wantNodeState("n1", store.NodeReady)
	})
	t.Run("a replica that just started", func(t *testing.T) {
		t.Parallel()
		h := lossHarness(t, Config{})
		h.r.started = time.Now()
		h.r.resync(h.ctx)
		h.wantNodeState("n1", store.NodeReady)
	})
	t.Run("a store that just came back", func(t *testing.T) {
		t.Parallel()
		h := lossHarness(t, Config{})
		db := &failingList{Store: h.r.store}
		h.r.store = db
		db.fail.Store(true)
		h.r.resync(h.ctx) // the database is unreachable
		db.fail.Store(false)
		h.r.resync(h.ctx)
		h.wantNodeState("n1", store.NodeReady) // silent only while no heartbeat could be recorded
		// NodeLostAfter later (the failure moved back rather than a sleep):
		h.r.storeFailed.Store(time.Now().Add(-h.r.cfg.NodeLostAfter - time.Second).UnixNano())
		h.r.resync(h.ctx)
		h.wantNodeState("n1", store.NodeDown) // still silent once the store has worked for NodeLostAfter
	})
	t.Run("loss detection off", func(t *testing.T) {
		t.Parallel()
		h := lossHarness(t, Config{})
		h.r.cfg.NodeLostAfter = -1
		h.r.resync(h.ctx)
		h.wantNodeState("n1", store.NodeReady)
	})
}

func TestDeletingASandboxOfALostNode(t *testing.T) {
	t.Parallel()
	h := lossHarness(t, Config{})
	sb := h.newSandbox(sandbox.StateDeleting, "ns", nil)
	h.snapshot(sb, nil)
	h.r.resync(h.ctx)
	h.wantNodeState("n1", store.NodeDown)
	h.mustPass(sb.ID)
	if _, err := h.st.GetSandboxByID(h.ctx, sb.ID); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("sandbox row after delete: err = %v, want not found", err)
	}
	wantCalls(t, h.nodes["n1"])
}

func TestLostNodeRecoveryWaitsForACapableNode(t *testing.T) {
	t.Parallel()
	h := lossHarness(t, Config{})
	if err := h.st.DeleteNode(h.ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
	h.snapshot(sb, func(s *store.Snapshot) { s.Tier, s.Artifacts = "hibernate", `{"objects":[]}` })
	h.r.resync(h.ctx)
	after, err := h.pass(sb.ID)
	if err == nil || after <= 0 {
		t.Fatalf("pass = %v, %v; want a requeue saying no node can take it", after, err)
	}
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	h.putNode("n3", time.Now())
	h.mustPass(sb.ID)
	if got := h.wantState(sb.ID, sandbox.StateRecovering, sandbox.StateRunning); got.Node != "n3" {
		t.Fatalf("recovering on %s, want n3", got.Node)
	}
}

// failingList is a store whose ListSandboxes fails while fail is set.
type failingList struct {
	store.Store
	fail atomic.Bool
}

func (f *failingList) ListSandboxes(ctx context.Context, flt store.SandboxFilter) ([]*sandbox.Sandbox, error) {
	if f.fail.Load() {
		return nil, fmt.Errorf("%w: database unreachable", errdefs.ErrUnavailable)
	}
	return f.Store.ListSandboxes(ctx, flt)
}

// TestLostNodeRecoveryAvoidsMemoryPressure: a recovery is placed as a
// create is: the only other node, under memory pressure as its heartbeats
// report, takes nothing until the pressure is over.
func TestLostNodeRecoveryAvoidsMemoryPressure(t *testing.T) {
	t.Parallel()
	var mem atomic.Pointer[map[string]scheduler.Memory]
	under := map[string]scheduler.Memory{"n2": {Measured: true, TotalMiB: 8192, AvailableMiB: 300, Pressure: "MemAvailable 300 MiB of 8.0 GiB (3.7%) below 10%"}}
	mem.Store(&under)
	h := lossHarness(t, Config{NodeMemory: func() map[string]scheduler.Memory { return *mem.Load() }})
	sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
	h.snapshot(sb, func(s *store.Snapshot) { s.Tier, s.Artifacts = "hibernate", `{"objects":[]}` })
	h.r.resync(h.ctx)
	after, err := h.pass(sb.ID)
	if err == nil || after <= 0 || !strings.Contains(err.Error(), "n2: memory pressure (MemAvailable 300 MiB") {
		t.Fatalf("pass = %v, %v; want a requeue saying n2 is under memory pressure", after, err)
	}
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	over := map[string]scheduler.Memory{"n2": {Measured: true, TotalMiB: 8192, AvailableMiB: 6000}}
	mem.Store(&over)
	h.mustPass(sb.ID)
	if got := h.wantState(sb.ID, sandbox.StateRecovering, sandbox.StateRunning); got.Node != "n2" {
		t.Fatalf("recovering on %s, want n2", got.Node)
	}
}
