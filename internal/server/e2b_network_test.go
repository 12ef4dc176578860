package server

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/egress"
)

// TestE2BUpdateNetwork: PUT /sandboxes/{id}/network (the SDK's
// updateNetwork) stores E2B's rules as the sandbox's SPACE policy and
// pushes it to the running execution, only for the owning tenant; a
// refused body changes nothing.
func TestE2BUpdateNetwork(t *testing.T) {
	cp := newControlPlane(t, Config{})
	sb := cp.create(`{"template":"minimal"}`)
	path := E2BPathPrefix + "/sandboxes/" + sb.ID + "/network"
	stored := func() egress.Spec {
		t.Helper()
		var got sandboxv1.EgressPolicy
		if code, e := cp.do(cp.key, http.MethodGet, "/v1/sandboxes/"+sb.ID+"/egress", "", &got); code != http.StatusOK {
			t.Fatalf("GET egress: HTTP %d %+v", code, e)
		}
		return normE2BSpec(apiSpec(t, &got))
	}
	if code, e := cp.do(cp.key, http.MethodPut, path, `{"denyOut":["0.0.0.0/0"],"allowOut":["1.1.1.1","Example.com"]}`, nil); code != http.StatusNoContent {
		t.Fatalf("PUT: HTTP %d %+v, want 204", code, e)
	}
	want := egress.Spec{Allow: egress.RuleSet{Domains: []string{"example.com"}, CIDRs: []string{"1.1.1.1/32"}}}
	if got := stored(); !reflect.DeepEqual(got, want) {
		t.Errorf("stored policy %+v, want %+v", got, want)
	}
	pushes := cp.node.pushList()
	if len(pushes) != 1 || pushes[0].exec != cp.node.lastStart(t, sb.ID).ExecID || !reflect.DeepEqual(normE2BSpec(specOf(t, pushes[0].egress)), want) {
		t.Fatalf("node got pushes %+v, want one of %+v to the running execution", pushes, want)
	}
	for _, tc := range []struct{ body, why string }{
		{`{"denyOut":["evil.com"]}`, "network.denyOut[0]"},
		{`{"allowOut":["example.com"]}`, "ALL_TRAFFIC"},
		{`{"rules":{"a.com":[{"transform":{"headers":{"A":"b"}}}]}}`, "network.rules"},
		{`{"egressProxy":{"address":"p:1080"}}`, "network.egressProxy"},
		{`{"allowOut":"1.1.1.1"}`, "malformed JSON"},
	} {
		code, e := cp.do(cp.key, http.MethodPut, path, tc.body, nil)
		if code != http.StatusBadRequest || !strings.Contains(e.Message, tc.why) {
			t.Errorf("PUT %s: HTTP %d %q, want 400 saying %q", tc.body, code, e.Message, tc.why)
		}
	}
	if got := stored(); !reflect.DeepEqual(got, want) {
		t.Errorf("a refused PUT changed the policy to %+v", got)
	}
	if code, _ := cp.do(cp.other, http.MethodPut, path, `{}`, nil); code != http.StatusNotFound {
		t.Errorf("another tenant's PUT: HTTP %d, want 404", code)
	}
	if got := stored(); !reflect.DeepEqual(got, want) {
		t.Errorf("another tenant's PUT changed the policy to %+v", got)
	}
	// {} clears every rule: everything allowed, as on E2B.
	if code, e := cp.do(cp.key, http.MethodPut, path, `{}`, nil); code != http.StatusNoContent {
		t.Fatalf("PUT {}: HTTP %d %+v", code, e)
	}
	if got := stored(); !reflect.DeepEqual(got, egress.Spec{AllowInternet: true}) {
		t.Errorf("after {}: %+v, want allow everything", got)
	}
	if n := len(cp.node.pushList()); n != 2 {
		t.Errorf("%d pushes, want 2 (the refused PUTs push nothing)", n)
	}
}

func normE2BSpec(s egress.Spec) egress.Spec {
	for _, l := range []*[]string{&s.Allow.Domains, &s.Allow.CIDRs, &s.Allow.Ports, &s.Deny.Domains, &s.Deny.CIDRs, &s.Deny.Ports} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	return s
}
