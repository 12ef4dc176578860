package reconcile

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

func lastStart(t *testing.T, n *fakeNode) nodev1.StartExecution {
	t.Helper()
	starts := n.callsTo("Start")
	if len(starts) == 0 {
		t.Fatalf("no Start on %s; calls %v", n.id, n.methods())
	}
	return starts[len(starts)-1].Body.(nodev1.StartExecution)
}

// TestStartCarriesCA: with SetCA every start carries what the CA source
// returns for that sandbox; without it, none.
func TestStartCarriesCA(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)

	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	h.mustPass(sb.ID)
	if ca := lastStart(t, h.nodes["n1"]).CA; ca != nil {
		t.Errorf("Start without a CA source carries CA %+v", ca)
	}

	var calls atomic.Int32
	h.r.SetCA(func(_ context.Context, sb *sandbox.Sandbox) (*nodev1.SandboxCA, error) {
		calls.Add(1)
		return &nodev1.SandboxCA{CertPEM: "cert of " + sb.ID, KeyPEM: "key of " + sb.ID}, nil
	})
	sb2 := h.newSandbox(sandbox.StateCreating, "ns", nil)
	h.mustPass(sb2.ID)
	got := lastStart(t, h.nodes["n1"])
	if got.SandboxID != sb2.ID || got.CA == nil || got.CA.CertPEM != "cert of "+sb2.ID || got.CA.KeyPEM != "key of "+sb2.ID {
		t.Errorf("Start = sandbox %s CA %+v, want the CA of %s", got.SandboxID, got.CA, sb2.ID)
	}
	if calls.Load() != 1 {
		t.Errorf("CA source called %d times for one start, want 1", calls.Load())
	}

	// A start after stop carries it again.
	sb2 = h.get(sb2.ID)
	if err := sb2.Apply(sandbox.OpStop); err != nil {
		t.Fatal(err)
	}
	sb2.State, sb2.Desired = sandbox.StateStopped, sandbox.StateStopped
	if err := h.st.UpdateSandbox(h.ctx, sb2); err != nil {
		t.Fatal(err)
	}
	if err := sb2.Apply(sandbox.OpStart); err != nil {
		t.Fatal(err)
	}
	sb2.Node = "n1"
	if err := h.st.UpdateSandbox(h.ctx, sb2); err != nil {
		t.Fatal(err)
	}
	h.mustPass(sb2.ID)
	if got := lastStart(t, h.nodes["n1"]); got.ExecID != sb2.ExecID || got.CA == nil || got.CA.CertPEM != "cert of "+sb2.ID {
		t.Errorf("start after stop = exec %s CA %+v, want exec %s with the CA", got.ExecID, got.CA, sb2.ExecID)
	}
}

// TestStartWaitsForCA: a CA source that fails makes the start wait and
// retry; the node is not asked to start without the CA.
func TestStartWaitsForCA(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	var fail atomic.Bool
	fail.Store(true)
	h.r.SetCA(func(_ context.Context, sb *sandbox.Sandbox) (*nodev1.SandboxCA, error) {
		if fail.Load() {
			return nil, errors.Join(errors.New("store busy"), errdefs.ErrUnavailable)
		}
		return &nodev1.SandboxCA{CertPEM: "c", KeyPEM: "k"}, nil
	})
	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	after, err := h.pass(sb.ID)
	if err == nil || after == 0 {
		t.Fatalf("pass with a failing CA source = %v, %v; want an error and a retry", after, err)
	}
	if n := len(h.nodes["n1"].callsTo("Start")); n != 0 {
		t.Fatalf("node asked to start %d times without a CA", n)
	}
	h.wantState(sb.ID, sandbox.StateCreating, sandbox.StateRunning)
	fail.Store(false)
	h.mustPass(sb.ID)
	if ca := lastStart(t, h.nodes["n1"]).CA; ca == nil || ca.CertPEM != "c" {
		t.Errorf("Start CA = %+v after the source recovered", ca)
	}
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
}

// TestStartAsksActivityOnlyWithAnIdleTimeout: a start tells the node to
// skip the guest's activity (a heartbeat round trip per execution) unless
// the sandbox has an idle timeout, which is what reads it.
func TestStartAsksActivityOnlyWithAnIdleTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	plain := h.newSandbox(sandbox.StateCreating, "ns", nil)
	h.mustPass(plain.ID)
	if !lastStart(t, h.nodes["n1"]).NoActivity {
		t.Error("a sandbox without an idle timeout starts with its activity asked for")
	}
	idle := h.newSandbox(sandbox.StateCreating, "ns", func(sb *sandbox.Sandbox) {
		sb.IdleTimeout, sb.IdleAction = time.Minute, sandbox.IdlePause
	})
	h.mustPass(idle.ID)
	if lastStart(t, h.nodes["n1"]).NoActivity {
		t.Error("a sandbox with an idle timeout starts with its activity never asked for: it would never idle")
	}
}
