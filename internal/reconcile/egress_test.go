package reconcile

import (
	"encoding/json"
	"reflect"
	"testing"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

func testPolicy(t *testing.T, js string) *egress.Policy {
	t.Helper()
	p, err := egress.ParsePolicy([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// wantStartCarries checks that the last Start node got has the tenant and,
// decoded, exactly policy p.
func wantStartCarries(t *testing.T, n *fakeNode, tenant string, p *egress.Policy) {
	t.Helper()
	starts := n.callsTo("Start")
	if len(starts) == 0 {
		t.Fatalf("no Start on %s; calls %v", n.id, n.methods())
	}
	req := starts[len(starts)-1].Body.(nodev1.StartExecution)
	if req.TenantID != tenant {
		t.Errorf("Start.TenantID = %q, want %q", req.TenantID, tenant)
	}
	if len(req.Egress) == 0 {
		t.Fatal("Start.Egress is empty: the node would deny everything")
	}
	got, err := egress.ParsePolicy(req.Egress)
	if err != nil {
		t.Fatalf("Start.Egress %s does not parse: %v", req.Egress, err)
	}
	if !reflect.DeepEqual(got.Spec(), p.Spec()) {
		t.Errorf("Start.Egress = %s, want %s", req.Egress, sandbox.EgressJSON(p))
	}
}

// TestStartCarriesTenantAndEgress drives every path that starts an
// execution and checks what the node is asked to run.
func TestStartCarriesTenantAndEgress(t *testing.T) {
	t.Parallel()
	const policyJSON = `{"allow_internet":false,"allow":{"domains":["*.pypi.org"],"ports":["443"]},"deny":{"cidrs":["203.0.113.0/24"]}}`
	// Each path stores the sandbox with the policy, drives it until its
	// execution runs, and returns the node that was asked to start it.
	type path struct {
		name    string
		objects bool
		run     func(h *harness, p *egress.Policy) *fakeNode
	}
	// restartFrom applies op to a sandbox in state from with a snapshot on
	// n1, which starts a new execution from that snapshot.
	restartFrom := func(op sandbox.Op, from sandbox.State) func(h *harness, p *egress.Policy) *fakeNode {
		return func(h *harness, p *egress.Policy) *fakeNode {
			sb := h.newSandbox(from, "ns", func(sb *sandbox.Sandbox) { sb.Egress = p })
			snap := h.snapshot(sb, nil)
			if err := sb.Apply(op); err != nil {
				h.t.Fatal(err)
			}
			sb.Node, sb.StartFrom = "n1", snap.ID
			if err := h.st.UpdateSandbox(h.ctx, sb); err != nil {
				h.t.Fatal(err)
			}
			h.mustPass(sb.ID)
			h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
			return h.nodes["n1"]
		}
	}
	for _, tc := range []path{
		{name: "create", run: func(h *harness, p *egress.Policy) *fakeNode {
			sb := h.newSandbox(sandbox.StateCreating, "ns", func(sb *sandbox.Sandbox) { sb.Egress = p })
			h.mustPass(sb.ID)
			h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
			return h.nodes["n1"]
		}},
		{name: "fork (created from the parent's snapshot)", run: func(h *harness, p *egress.Policy) *fakeNode {
			parent := h.newSandbox(sandbox.StateRunning, "ns", nil)
			snap := h.snapshot(parent, nil)
			child := h.newSandbox(sandbox.StateCreating, "ns", func(sb *sandbox.Sandbox) { sb.Egress, sb.StartFrom = p, snap.ID })
			h.mustPass(child.ID)
			h.wantState(child.ID, sandbox.StateRunning, sandbox.StateRunning)
			return h.nodes["n1"]
		}},
		{name: "start after stop", run: restartFrom(sandbox.OpStart, sandbox.StateStopped)},
		{name: "rollback", run: restartFrom(sandbox.OpRollback, sandbox.StateRunning)},
		{name: "restore after hibernate", objects: true, run: func(h *harness, p *egress.Policy) *fakeNode {
			sb, _ := h.restoring(nil)
			sb = h.get(sb.ID)
			sb.Egress = p
			if err := h.st.UpdateSandbox(h.ctx, sb); err != nil {
				h.t.Fatal(err)
			}
			h.mustPass(sb.ID)
			h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
			return h.nodes["n2"]
		}},
		{name: "crash recovery", run: func(h *harness, p *egress.Policy) *fakeNode {
			sb := h.newSandbox(sandbox.StateRunning, "ns", func(sb *sandbox.Sandbox) { sb.Egress = p })
			h.snapshot(sb, nil)
			ex := exec(sb, nodev1.ExecFailed)
			h.observe("n1", ex)
			h.mustPass(sb.ID)
			h.wantState(sb.ID, sandbox.StateRecovering, sandbox.StateRunning)
			h.mustPass(sb.ID)
			h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
			return h.nodes["n1"]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{}, tc.objects)
			if tc.objects {
				if err := h.st.CreateTemplate(h.ctx, store.Template{Name: "minimal", Source: "dir:/srv/minimal", State: store.TemplateReady}); err != nil {
					t.Fatal(err)
				}
			}
			p := testPolicy(t, policyJSON)
			n := tc.run(h, p)
			wantStartCarries(t, n, h.tenant, p)
		})
	}
}

// TestStartWithoutOwnPolicy: a sandbox recorded before egress policies
// starts with the default the server set, or the built-in one.
func TestStartWithoutOwnPolicy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	h.mustPass(sb.ID)
	wantStartCarries(t, h.nodes["n1"], h.tenant, sandbox.DefaultEgress())
	var spec egress.Spec
	if err := json.Unmarshal(h.nodes["n1"].callsTo("Start")[0].Body.(nodev1.StartExecution).Egress, &spec); err != nil || !spec.AllowInternet {
		t.Errorf("built-in default sent as %+v, %v; want allow_internet", spec, err)
	}

	def := testPolicy(t, `{"allow_internet":false,"allow":{"domains":["example.com"]}}`)
	h.r.SetDefaultEgress(def)
	if h.r.DefaultEgress() != def {
		t.Fatal("DefaultEgress does not return what SetDefaultEgress set")
	}
	sb2 := h.newSandbox(sandbox.StateCreating, "ns", nil)
	h.mustPass(sb2.ID)
	wantStartCarries(t, h.nodes["n1"], h.tenant, def)

	// A sandbox's own policy wins over the default.
	own := testPolicy(t, `{"allow_internet":true,"deny":{"ports":["25"]}}`)
	sb3 := h.newSandbox(sandbox.StateCreating, "ns", func(sb *sandbox.Sandbox) { sb.Egress = own })
	h.mustPass(sb3.ID)
	wantStartCarries(t, h.nodes["n1"], h.tenant, own)

	h.r.SetDefaultEgress(nil)
	if got := h.r.DefaultEgress(); !got.Spec().AllowInternet {
		t.Error("SetDefaultEgress(nil) did not restore the built-in default")
	}
}
