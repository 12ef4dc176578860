package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestTenantQuota sets a tenant's quota with the CLI on a real server: two
// ns sandboxes run, the third create is refused with 429 naming the quota,
// and deleting one makes room for it.
func TestTenantQuota(t *testing.T) {
	in := startServer(t, t.TempDir())
	out, errOut, code := in.cli("", "tenant", "create", "quota-e2e", "-o", "json")
	if code != 0 {
		t.Fatalf("tenant create: exit %d: %s", code, errOut)
	}
	var created struct {
		Tenant struct{ ID string } `json:"tenant"`
		Key    string              `json:"key"`
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil || created.Key == "" {
		t.Fatalf("tenant create -o json = %q: %v", out, err)
	}
	tenant, key := created.Tenant.ID, created.Key
	var ours []string
	t.Cleanup(func() {
		for _, id := range ours {
			in.doKey(key, "DELETE", "/v1/sandboxes/"+id, nil, nil)
		}
	})
	if out, errOut, code := in.cli("", "tenant", "quota", tenant, "--max-sandboxes", "2"); code != 0 || !strings.Contains(out, "sandboxes") {
		t.Fatalf("tenant quota --max-sandboxes 2: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	create := func() (int, sandbox, string) {
		t.Helper()
		var sb struct {
			sandbox
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		code := in.doKey(key, "POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 256}, &sb)
		if code == http.StatusCreated {
			ours = append(ours, sb.ID)
		}
		return code, sb.sandbox, sb.Code + ": " + sb.Message
	}
	var first sandbox
	for i := range 2 {
		code, sb, msg := create()
		if code != http.StatusCreated || sb.State != "running" {
			t.Fatalf("create %d within quota: HTTP %d %s %s\n%s", i+1, code, sb.State, msg, in.logs())
		}
		if i == 0 {
			first = sb
		}
	}
	code, _, msg := create()
	if code != http.StatusTooManyRequests || !strings.HasPrefix(msg, "resource_exhausted: ") ||
		!strings.Contains(msg, "at most 2 running sandboxes") || !strings.Contains(msg, "delete or hibernate a sandbox") {
		t.Fatalf("third create: HTTP %d %q; want 429 resource_exhausted naming the quota", code, msg)
	}
	out, _, _ = in.cli("", "tenant", "quota", tenant, "-o", "json")
	if !strings.Contains(out, `"sandboxes": 2`) && !strings.Contains(out, `"sandboxes":2`) {
		t.Errorf("tenant quota -o json = %s; want usage of 2 sandboxes", out)
	}
	if code := in.doKey(key, "DELETE", "/v1/sandboxes/"+first.ID, nil, nil); code != http.StatusNoContent {
		t.Fatalf("delete %s: HTTP %d", first.ID, code)
	}
	ours = ours[1:]
	if code, sb, msg := create(); code != http.StatusCreated || sb.State != "running" {
		t.Fatalf("create after a delete: HTTP %d %s %s\n%s", code, sb.State, msg, in.logs())
	}
	var events struct {
		Events []struct{ Type, Message string } `json:"events"`
	}
	in.doKey(key, "GET", "/v1/sandboxes/"+ours[len(ours)-1]+"/events", nil, &events)
	found := false
	for _, e := range events.Events {
		found = found || e.Type == "scheduled" && strings.Contains(e.Message, "quota 2 sandboxes")
	}
	if !found {
		t.Errorf("events %+v; want the scheduled event to report the quota", events.Events)
	}
}
