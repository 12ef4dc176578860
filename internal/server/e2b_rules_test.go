package server

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/service"
)

// Rule values of TestE2BNetworkRules: long enough to be told apart from
// any other text of the logs and answers.
const (
	ruleExact    = "Bearer e2b-rule-exact-0123456789abcdef"
	ruleWildcard = "Bearer e2b-rule-wildcard-0123456789abcdef"
	ruleLonger   = "Bearer e2b-rule-longer-wildcard-0123456789"
	ruleNew      = "Bearer e2b-rule-replaced-0123456789abcdef"
	ruleOrg      = "org-e2b-rule-second-header-0123456789"
)

// TestE2BNetworkRules: network.rules on an E2B create become the
// sandbox's header rules, resolved for its node with E2B's precedence
// (exact name, then the longest wildcard); getInfo lists them without
// values; updateNetwork replaces them (left out: cleared); a fork gets a
// copy; the delete removes them; no value is in a log line or an answer.
func TestE2BNetworkRules(t *testing.T) {
	cp := newCredPlane(t)
	rules := `{"api.example.com":[{"transform":{"headers":{"Authorization":"` + ruleExact + `"}}}],` +
		`"*.example.com":[{"transform":{"headers":{"Authorization":"` + ruleWildcard + `"}}}],` +
		`"*.deep.Example.com":[{"transform":{"headers":{"X-Key":"` + ruleLonger + `"}}}],` +
		`"multi.test":[{"transform":{"headers":{"X-Org":"` + ruleOrg + `","Authorization":"` + ruleExact + `"}}}]}`
	code, b := cp.call(t, cp.key, http.MethodPost, E2BPathPrefix+"/sandboxes",
		`{"templateID":"minimal","network":{"allowOut":["example.com"],"denyOut":["0.0.0.0/0"],"rules":`+rules+`}}`)
	if code != http.StatusCreated {
		t.Fatalf("create: HTTP %d %s", code, b)
	}
	var created struct{ SandboxID string }
	if err := json.Unmarshal(b, &created); err != nil {
		t.Fatal(err)
	}
	id := created.SandboxID
	resolve := func(sandboxID, host string) (int, nodev1.ResolvedCredential) {
		t.Helper()
		cur, err := cp.st.GetSandboxByID(t.Context(), sandboxID)
		if err != nil {
			t.Fatal(err)
		}
		code, out, _ := cp.resolve(t, cp.nodeCred, "n1", nodev1.ResolveCredential{SandboxID: sandboxID, ExecID: cur.ExecID, Host: host})
		return code, out
	}
	want := func(sandboxID, host, header, value string) {
		t.Helper()
		code, out := resolve(sandboxID, host)
		if value == "" {
			if code == http.StatusOK {
				t.Errorf("%s of %s: resolved %s, want no header", host, sandboxID, out.Name)
			}
			return
		}
		if code != http.StatusOK || out.Method != "header" || out.Name != header || string(out.Secret) != value {
			t.Errorf("%s of %s: HTTP %d %s (%d bytes), want header %s with its rule's value", host, sandboxID, code, out.Name, len(out.Secret), header)
		}
	}
	want(id, "api.example.com", "Authorization", ruleExact)
	want(id, "other.example.com", "Authorization", ruleWildcard)
	want(id, "a.deep.example.com", "X-Key", ruleLonger)
	// Several headers of one host: one credential of the headers method.
	wantMulti := func(sandboxID string) {
		t.Helper()
		code, out := resolve(sandboxID, "multi.test")
		if code != http.StatusOK || out.Method != credentials.MethodHeaders || out.Name != "Authorization,X-Org" || string(out.Secret) != ruleExact+"\n"+ruleOrg {
			t.Errorf("multi.test of %s: HTTP %d %s %s (%d bytes), want headers Authorization and X-Org with their values", sandboxID, code, out.Method, out.Name, len(out.Secret))
		}
	}
	wantMulti(id)
	want(id, "example.com", "", "") // a wildcard is not its apex
	want(id, "api.other.test", "", "")

	// getInfo: hosts and header names, no value.
	code, b = cp.call(t, cp.key, http.MethodGet, E2BPathPrefix+"/sandboxes/"+id, "")
	var info struct {
		Network struct {
			Rules map[string][]struct {
				Transform struct{ Headers map[string]string }
			}
		}
	}
	if err := json.Unmarshal(b, &info); code != http.StatusOK || err != nil {
		t.Fatalf("getInfo: HTTP %d %v %s", code, err, b)
	}
	if r := info.Network.Rules["*.deep.example.com"]; len(r) != 1 || len(r[0].Transform.Headers) != 1 || r[0].Transform.Headers["X-Key"] != "" {
		t.Errorf("getInfo's rules %s, want each host with its header name and no value", b)
	}
	if r := info.Network.Rules["multi.test"]; len(r) != 1 || len(r[0].Transform.Headers) != 2 || r[0].Transform.Headers["X-Org"] != "" || r[0].Transform.Headers["Authorization"] != "" {
		t.Errorf("getInfo's rules %s, want multi.test with both header names and no value", b)
	}

	// A fork gets its parent's rules. (The fake node takes no snapshot, so
	// the copy the fork handler makes is called on a second sandbox.)
	code, b = cp.call(t, cp.key, http.MethodPost, E2BPathPrefix+"/sandboxes", `{"templateID":"minimal"}`)
	if err := json.Unmarshal(b, &created); code != http.StatusCreated || err != nil {
		t.Fatalf("create the second sandbox: HTTP %d %s", code, b)
	}
	child := created.SandboxID
	from, _ := cp.st.GetSandboxByID(t.Context(), id)
	to, _ := cp.st.GetSandboxByID(t.Context(), child)
	if err := service.NewCredentials(cp.st, cp.backend, nil, slog.New(slog.NewTextHandler(cp.logs, nil))).CopyHeaderRules(t.Context(), from, to); err != nil {
		t.Fatal(err)
	}
	want(child, "api.example.com", "Authorization", ruleExact)
	wantMulti(child)

	// updateNetwork replaces the set: a changed value, a host gone.
	code, b = cp.call(t, cp.key, http.MethodPut, E2BPathPrefix+"/sandboxes/"+id+"/network",
		`{"rules":{"api.example.com":[{"transform":{"headers":{"X-Other":"`+ruleNew+`"}}}]}}`)
	if code != http.StatusNoContent {
		t.Fatalf("updateNetwork: HTTP %d %s", code, b)
	}
	want(id, "api.example.com", "X-Other", ruleNew)
	want(id, "other.example.com", "", "")
	want(child, "other.example.com", "Authorization", ruleWildcard) // the fork's copy is its own

	// A refused update changes nothing.
	code, _ = cp.call(t, cp.key, http.MethodPut, E2BPathPrefix+"/sandboxes/"+id+"/network",
		`{"rules":{"api.example.com":[{"transform":{"headers":{"Host":"`+ruleExact+`"}}}]}}`)
	if code != http.StatusBadRequest {
		t.Errorf("updateNetwork setting Host: HTTP %d, want 400", code)
	}
	want(id, "api.example.com", "X-Other", ruleNew)

	// Left out, the rules are cleared.
	if code, b = cp.call(t, cp.key, http.MethodPut, E2BPathPrefix+"/sandboxes/"+id+"/network", `{}`); code != http.StatusNoContent {
		t.Fatalf("updateNetwork {}: HTTP %d %s", code, b)
	}
	want(id, "api.example.com", "", "")

	// The delete removes the fork's rules from the credential backend.
	childSb, err := cp.st.GetSandboxByID(t.Context(), child)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := cp.backend.List(t.Context(), credentials.Scope{Tenant: childSb.Tenant, Sandbox: child}); len(got) != 4 {
		t.Fatalf("the fork has %d header rules in the backend, want 4", len(got))
	}
	if code, b = cp.call(t, cp.key, http.MethodDelete, E2BPathPrefix+"/sandboxes/"+child, ""); code != http.StatusNoContent {
		t.Fatalf("kill the fork: HTTP %d %s", code, b)
	}
	// A rule set while (or after) it is deleted is refused, so that
	// none outlives it.
	if err := service.NewCredentials(cp.st, cp.backend, nil, slog.New(slog.NewTextHandler(cp.logs, nil))).ReplaceHeaderRules(t.Context(), to,
		[]service.HeaderRule{{Host: "late.example.com", Headers: []service.RuleHeader{{Name: "X-Late", Value: ruleNew}}}}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("header rules set on a deleted sandbox: %v, want NotFound", err)
	}
	waitFor(t, "the fork's row to go", func() bool {
		_, err := cp.st.GetSandboxByID(t.Context(), child)
		return errors.Is(err, errdefs.ErrNotFound)
	})
	if got, err := cp.backend.List(t.Context(), credentials.Scope{Tenant: childSb.Tenant, Sandbox: child}); err != nil || len(got) != 0 {
		t.Errorf("the deleted fork's header rules: %d in the backend (%v), want none", len(got), err)
	}
	rows, err := cp.st.ListCredentials(t.Context(), childSb.Tenant)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rows {
		if c.Sandbox == child {
			t.Errorf("credential %s of the deleted fork is still indexed", c.ID)
		}
	}
	for _, v := range []string{ruleExact, ruleWildcard, ruleLonger, ruleNew, ruleOrg} {
		if strings.Contains(cp.logs.String(), v) || strings.Contains(cp.bodies.String(), v) {
			t.Errorf("a rule's value is in the server log or an answer")
		}
	}
}
