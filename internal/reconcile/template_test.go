package reconcile

import (
	"fmt"
	"slices"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// TestStartMakesAMissingTemplate: a node that answers a start with
// errdefs.ErrTemplateMissing is asked to make the template and the start is
// tried again; a failed precondition of another reason is not, whatever its
// text says, and fails the sandbox.
func TestStartMakesAMissingTemplate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		err     error
		retried bool
	}{
		{"template missing", fmt.Errorf("%w: template %q is not on this node", errdefs.ErrTemplateMissing, "minimal"), true},
		{"another precondition", fmt.Errorf("%w: snapshot s1 is not on this node", errdefs.ErrFailedPrecondition), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{}, false)
			if err := h.st.CreateTemplate(h.ctx, store.Template{Name: "minimal", Source: "dir:/srv/minimal", State: store.TemplateReady}); err != nil {
				t.Fatal(err)
			}
			sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
			n := h.nodes["n1"]
			n.failNext("Start", 1, tc.err)
			if _, err := h.pass(sb.ID); err != nil {
				t.Fatalf("pass: %v", err)
			}
			calls := n.methods()
			if !tc.retried {
				if slices.Contains(calls, "EnsureTemplate(minimal)") {
					t.Errorf("calls = %v, want no EnsureTemplate for %v", calls, tc.err)
				}
				got := h.wantState(sb.ID, sandbox.StateFailed, sandbox.StateFailed)
				wantReason(t, got, "start: ", "snapshot s1 is not on this node")
				return
			}
			wantCalls(t, n, "Start("+sb.ExecID+")", "EnsureTemplate(minimal)", "Start("+sb.ExecID+")")
			if src := n.callsTo("EnsureTemplate")[0].Body; src != "dir:/srv/minimal" {
				t.Errorf("EnsureTemplate source = %v, want dir:/srv/minimal", src)
			}
			h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
			h.wantEvent(sb.ID, "template", "materialising template minimal on n1")
		})
	}
}

// TestStartWaitsForNodeCapacity: a node with no room now (no_capacity, of
// class ResourceExhausted) is asked again, as an unavailable node is.
func TestStartWaitsForNodeCapacity(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	h.nodes["n1"].failNext("Start", 1, fmt.Errorf("%w: ns: all 64 uid ranges are in use", errdefs.ErrNoCapacity))
	after, err := h.pass(sb.ID)
	if !errdefs.IsResourceExhausted(err) || after <= 0 {
		t.Fatalf("pass = %v, %v; want a requeue with the no-capacity error", after, err)
	}
	h.wantState(sb.ID, sandbox.StateCreating, sandbox.StateRunning)
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
}
