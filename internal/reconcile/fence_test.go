package reconcile

import (
	"io"
	"log/slog"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

func fenced(sb *sandbox.Sandbox) nodev1.Execution {
	ex := exec(sb, nodev1.ExecRunning)
	ex.Fenced = true
	return ex
}

// TestFencedExecutionThawedWhenItsNodeIsBack: a node that was cut off for a
// while, but not declared lost, reports its sandbox's execution fenced; the
// pass resumes it, once, and says why.
func TestFencedExecutionThawedWhenItsNodeIsBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	h.putNode("n1", time.Now())
	sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
	h.observe("n1", fenced(sb))
	h.r.q.mu.Lock()
	queued := h.r.q.dirty[sb.ID]
	h.r.q.mu.Unlock()
	if !queued {
		t.Fatal("a fenced execution's report did not queue its sandbox")
	}
	h.mustPass(sb.ID)
	wantCalls(t, h.nodes["n1"], "Resume("+sb.ExecID+")")
	h.wantEvent(sb.ID, "resumed", "froze execution "+sb.ExecID)
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)

	// The report that still says fenced (sent before the resume) does not
	// resume it again; a newer one that says so does.
	h.mustPass(sb.ID)
	wantCalls(t, h.nodes["n1"], "Resume("+sb.ExecID+")")
	time.Sleep(time.Millisecond)
	h.observe("n1", fenced(sb))
	h.mustPass(sb.ID)
	wantCalls(t, h.nodes["n1"], "Resume("+sb.ExecID+")", "Resume("+sb.ExecID+")")
}

// TestFencedExecutionOfARecoveredSandboxStaysFrozen: when the sandbox was
// recovered elsewhere while its node was cut off, the old execution the
// node reports fenced is never resumed: the node is told to stop it.
func TestFencedExecutionOfARecoveredSandboxStaysFrozen(t *testing.T) {
	t.Parallel()
	h := lossHarness(t, Config{})
	sb := h.newSandbox(sandbox.StateRunning, "vm", nil)
	h.snapshot(sb, func(s *store.Snapshot) {
		s.Kind, s.Tier, s.Artifacts = store.SnapshotFull, "hibernate", `{"objects":[]}`
	})
	h.observe("n1", exec(sb, nodev1.ExecRunning))
	h.r.resync(h.ctx)
	h.mustPass(sb.ID) // recovering on n2
	h.mustPass(sb.ID) // running on n2
	if got := h.get(sb.ID); got.Node != "n2" {
		t.Fatalf("not recovered: on %s", got.Node)
	}
	// n1 is back and reports the old execution fenced.
	h.putNode("n1", time.Now())
	h.observe("n1", fenced(sb))
	h.mustPass(sb.ID)
	h.r.resync(h.ctx)
	for _, c := range h.nodes["n1"].methods() {
		if c == "Resume("+sb.ExecID+")" {
			t.Fatalf("the old execution of a recovered sandbox was resumed: %v", h.nodes["n1"].methods())
		}
	}
	wantCalls(t, h.nodes["n1"], "Stop("+sb.ExecID+")")
}

// TestFenceAfter: a third of the node-lost timeout; none when node loss is off.
func TestFenceAfter(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if got := New(Config{}, openStore(t), nil, log).FenceAfter(); got != DefaultNodeLostAfter/3 {
		t.Errorf("default: %v", got)
	}
	if got := New(Config{NodeLostAfter: -1}, openStore(t), nil, log).FenceAfter(); got != 0 {
		t.Errorf("node loss off: %v, want 0", got)
	}
}
