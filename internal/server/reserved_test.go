package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/sandbox"
)

// TestReservedKeysRefused (G-5): metadata in the platform's namespaces and
// the environment variables the platform reserves are refused with 400,
// naming the key, at the native create and the E2B create, before any
// sandbox is recorded.
func TestReservedKeysRefused(t *testing.T) {
	cp := newControlPlane(t, Config{})
	for _, body := range []string{
		`{"template":"minimal","metadata":{"space.tenant":"x"}}`,
		`{"template":"minimal","metadata":{"E2B.sandboxID":"x"}}`,
		`{"template":"minimal","env":{"E2B_SANDBOX_ID":"x"}}`,
		`{"template":"minimal","env":{"SPACE_NODE_ID":"n2"}}`,
	} {
		code, e := cp.do(cp.key, http.MethodPost, "/v1/sandboxes", body, nil)
		if code != http.StatusBadRequest || e.Code != sandboxv1.CodeInvalidArgument || !strings.Contains(e.Message, "reserved for the platform") {
			t.Errorf("native create %s: HTTP %d %+v, want 400 naming the reserved key", body, code, e)
		}
	}
	if n := cp.count(); n != 0 {
		t.Errorf("%d sandboxes recorded after refused creates", n)
	}

	p := newE2BPlane(t)
	for _, body := range []string{
		`{"templateID":"minimal","metadata":{"e2b/teamID":"x"}}`,
		`{"templateID":"minimal","envVars":{"E2B_SANDBOX":"false"}}`,
	} {
		a := p.e2bCall(http.MethodPost, "/v2/sandboxes", p.key, body)
		wantE2BError(t, "E2B create "+body, a, http.StatusBadRequest)
		if !strings.Contains(a.body, "reserved for the platform") {
			t.Errorf("E2B create %s: %s, want the reason", body, a.body)
		}
	}
}

// TestMetadataNeverRoutes (G-5): a sandbox whose metadata and environment
// name another tenant's sandbox, tenant, node and execution — even in the
// reserved namespaces, as a row recorded before they were refused could —
// is still routed to itself: the E2B data plane and the native API reach
// its own execution, and its tenant's key, not the named one's, opens it.
func TestMetadataNeverRoutes(t *testing.T) {
	p := newE2BPlane(t)
	victim := p.sandbox(p.otherTenant, sandbox.StateRunning, nil)
	lies := map[string]string{
		"sandboxID": victim.ID, "sandbox_id": victim.ID, "id": victim.ID, "tenant": p.otherTenant,
		"node": "node-b", "execID": victim.ExecID, "space.sandbox": victim.ID, "space.tenant": p.otherTenant,
		"e2b.sandboxID": victim.ID,
	}
	sb := sandbox.New(p.tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256, Metadata: lies,
		Env: map[string]string{"E2B_SANDBOX_ID": victim.ID, "SPACE_TENANT_ID": p.otherTenant}}, time.Now())
	sb.State = sandbox.StateRunning
	liar := p.installed(sb)

	got := guestSaw(t, p.envd(http.MethodPost, "/process.Process/Start", liar.ID, p.srv.e2bAPI.AccessToken(liar.ID)))
	if c := p.node.last(); c == nil || c.Identity != identityOf(liar) || got.Path != "/process.Process/Start" {
		t.Fatalf("E2B data plane: capability %+v, want %+v (the sandbox's own execution)", c, identityOf(liar))
	}
	a := p.send(http.MethodGet, "/v1/sandboxes/"+liar.ID+"/files?path=/etc/hostname", "", "", map[string]string{"Authorization": "Bearer " + p.key})
	if c := p.node.last(); a.status != http.StatusOK || c == nil || c.Identity != identityOf(liar) {
		t.Errorf("native files: HTTP %d %s, capability %+v, want %+v", a.status, a.body, c, identityOf(liar))
	}
	for _, ans := range []answer{
		p.send(http.MethodGet, "/v1/sandboxes/"+liar.ID, "", "", map[string]string{"Authorization": "Bearer " + p.other}),
		p.e2bCall(http.MethodGet, "/sandboxes/"+liar.ID, p.other, ""),
	} {
		if ans.status != http.StatusNotFound {
			t.Errorf("the tenant the metadata names opened the sandbox: HTTP %d %s", ans.status, ans.body)
		}
	}
	// The victim's token does not open the liar, nor the liar's the victim.
	if a := p.envd(http.MethodPost, "/process.Process/Start", liar.ID, p.srv.e2bAPI.AccessToken(victim.ID)); a.status != http.StatusUnauthorized {
		t.Errorf("victim's token on the liar: HTTP %d", a.status)
	}
	if a := p.envd(http.MethodPost, "/process.Process/Start", victim.ID, p.srv.e2bAPI.AccessToken(liar.ID)); a.status != http.StatusUnauthorized {
		t.Errorf("liar's token on the victim: HTTP %d", a.status)
	}
}
