package reconcile

import (
	"errors"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// drainHarness is a harness with ready nodes n1 and n2 where n1 is
// draining.
func drainHarness(t *testing.T, withObjects bool) *harness {
	t.Helper()
	h := newHarness(t, Config{}, withObjects)
	h.putNode("n1", time.Now())
	h.putNode("n2", time.Now())
	h.setNodeState("n1", store.NodeDraining)
	return h
}

func (h *harness) setNodeState(id string, state store.NodeState) {
	h.t.Helper()
	n, err := h.st.GetNode(h.ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	n.State = state
	if err := h.st.PutNode(h.ctx, n); err != nil {
		h.t.Fatal(err)
	}
}

func TestDrainMovesTheSandboxToAnotherNode(t *testing.T) {
	t.Parallel()
	for _, state := range []sandbox.State{sandbox.StateRunning, sandbox.StatePaused} {
		t.Run(string(state), func(t *testing.T) {
			t.Parallel()
			h := drainHarness(t, true)
			sb := h.newSandbox(state, "vm", nil)
			h.nodes["n1"].upload = h.nodeUpload(false)
			id := sandbox.LifecycleSnapshotID(sb.ID, "hibernate", sb.Generation)

			// Pass 1 starts the hibernation, pass 2 does it, pass 3 places
			// the restore on n2, pass 4 starts it there.
			h.mustPass(sb.ID)
			h.wantState(sb.ID, sandbox.StateHibernating, state)
			h.mustPass(sb.ID)
			h.wantState(sb.ID, sandbox.StateHibernated, state)
			x := sb.ExecID
			wantCalls(t, h.nodes["n1"], "Pause("+x+")", "Snapshot("+x+")", "Upload("+id+")", "Stop("+x+")", "DeleteSnapshot("+id+")")
			h.mustPass(sb.ID)
			got := h.wantState(sb.ID, sandbox.StateRestoring, state)
			if got.Node != "n2" || got.Generation != sb.Generation+1 || got.StartFrom != id {
				t.Fatalf("restoring on %q generation %d from %q; want n2, generation %d, %s", got.Node, got.Generation, got.StartFrom, sb.Generation+1, id)
			}
			h.wantEvent(sb.ID, "draining", "node n1 is draining: hibernating")
			h.wantEvent(sb.ID, "draining", "node n1 is draining: moving to n2")
			h.mustPass(sb.ID)
			got = h.wantState(sb.ID, sandbox.StateRunning, state)
			wantCalls(t, h.nodes["n2"], "Download("+id+")", "Start("+got.ExecID+")")
			if state == sandbox.StatePaused {
				h.mustPass(sb.ID)
				h.wantState(sb.ID, sandbox.StatePausing, sandbox.StatePaused)
				h.mustPass(sb.ID)
				h.wantState(sb.ID, sandbox.StatePaused, sandbox.StatePaused)
				wantCalls(t, h.nodes["n2"], "Download("+id+")", "Start("+got.ExecID+")", "Pause("+got.ExecID+")")
			}
			// Settled on n2: further passes leave it there.
			h.mustPass(sb.ID)
			if got := h.get(sb.ID); got.Node != "n2" || got.State != state {
				t.Fatalf("after the move: %s on %s, want %s on n2", got.State, got.Node, state)
			}
		})
	}
}

func TestDrainWithoutAnotherNodeLeavesTheSandboxHibernated(t *testing.T) {
	t.Parallel()
	h := drainHarness(t, true)
	if err := h.st.DeleteNode(h.ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	sb := h.newSandbox(sandbox.StateRunning, "vm", nil)
	h.nodes["n1"].upload = h.nodeUpload(false)
	h.mustPass(sb.ID)
	h.mustPass(sb.ID)
	h.mustPass(sb.ID)
	got := h.wantState(sb.ID, sandbox.StateHibernated, sandbox.StateHibernated)
	wantReason(t, got, "node n1 is draining", "no other node can take the sandbox", "stays hibernated")
	h.wantEvent(sb.ID, "refused", "stays hibernated in object storage")
	if got.Node != "" || got.StartFrom == "" {
		t.Fatalf("hibernated sandbox: node %q start from %q; want none, its snapshot", got.Node, got.StartFrom)
	}
	// Nothing more happens to it.
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StateHibernated, sandbox.StateHibernated)
}

func TestDrainWithoutObjectStoreLeavesTheSandboxInPlace(t *testing.T) {
	t.Parallel()
	h := drainHarness(t, false)
	sb := h.newSandbox(sandbox.StateRunning, "vm", nil)
	h.mustPass(sb.ID)
	got := h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	wantReason(t, got, "node n1 is draining", "no object store")
	h.wantEvent(sb.ID, "refused", "it stays on n1")
	h.mustPass(sb.ID)
	if n := len(h.events(sb.ID)); n != 1 {
		t.Errorf("events after two passes = %v, want the refusal once", h.events(sb.ID))
	}
	wantCalls(t, h.nodes["n1"])
}

func TestNoDrainOnAReadyNode(t *testing.T) {
	t.Parallel()
	h := drainHarness(t, true)
	h.setNodeState("n1", store.NodeReady)
	sb := h.newSandbox(sandbox.StateRunning, "vm", nil)
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	wantCalls(t, h.nodes["n1"])
}

// A refused hibernation leaves the sandbox on the draining node, running
// again as it was, with the reason; the drain tries again only after
// drainRetry.
func TestDrainRetriesARefusedHibernationLater(t *testing.T) {
	t.Parallel()
	h := drainHarness(t, true)
	sb := h.newSandbox(sandbox.StateRunning, "vm", nil)
	h.nodes["n1"].upload = func(string, nodev1.UploadSnapshot) (*nodev1.Artifacts, error) {
		return nil, errors.Join(errors.New("tenant key revoked"), errdefs.ErrPermissionDenied)
	}
	h.mustPass(sb.ID)
	h.mustPass(sb.ID)
	// Refused: it was running, so it is resumed where it is.
	got := h.wantState(sb.ID, sandbox.StateResuming, sandbox.StateRunning)
	h.mustPass(sb.ID)
	got = h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	wantReason(t, got, "hibernate failed", "tenant key revoked")
	if got.Node != "n1" {
		t.Fatalf("refused sandbox on %q, want n1", got.Node)
	}
	h.wantEvent(sb.ID, "draining", "could not move the sandbox: resuming it there")
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)

	h.nodes["n1"].upload = h.nodeUpload(false)
	h.st.backdate(sb.ID, drainRetry+time.Second)
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StateHibernating, sandbox.StateRunning)
	h.mustPass(sb.ID)
	h.mustPass(sb.ID)
	if got := h.wantState(sb.ID, sandbox.StateRestoring, sandbox.StateRunning); got.Node != "n2" {
		t.Fatalf("restoring on %q, want n2", got.Node)
	}
}
