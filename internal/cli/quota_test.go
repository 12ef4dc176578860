package cli

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// TestTenantQuotaKeepsUnnamedLimits sets one limit and checks that the PUT
// carries the others unchanged, then shows the quota without changing it.
func TestTenantQuotaKeepsUnnamedLimits(t *testing.T) {
	tenant := sandboxv1.Tenant{ID: "t-1", Name: "acme", Quota: sandboxv1.Quota{MaxSandboxes: 5, MaxMemoryMiB: 2048}, Usage: sandboxv1.Usage{Sandboxes: 2, MemoryMiB: 1024, CPUs: 2}}
	var puts []sandboxv1.Quota
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tenants", func(w http.ResponseWriter, r *http.Request) {
		writeJSONResp(w, 200, sandboxv1.TenantList{Tenants: []sandboxv1.Tenant{tenant}})
	})
	mux.HandleFunc("PUT /v1/tenants/{id}/quota", func(w http.ResponseWriter, r *http.Request) {
		var q sandboxv1.Quota
		if err := json.NewDecoder(r.Body).Decode(&q); err != nil || r.PathValue("id") != "t-1" {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, "bad request")
			return
		}
		puts = append(puts, q)
		tenant.Quota = q
		writeJSONResp(w, 200, tenant)
	})
	fakeServer(t, mux)
	code, out, errOut := run(t, nil, "tenant", "quota", "t-1", "--max-cpus", "4")
	if code != 0 {
		t.Fatalf("tenant quota --max-cpus 4: exit %d, stderr %q", code, errOut)
	}
	want := sandboxv1.Quota{MaxSandboxes: 5, MaxMemoryMiB: 2048, MaxCPUs: 4}
	if len(puts) != 1 || puts[0] != want {
		t.Fatalf("PUT bodies = %+v, want one %+v", puts, want)
	}
	for _, line := range []string{"sandboxes", "5", "memory-mib", "2048", "cpus", "4"} {
		if !strings.Contains(out, line) {
			t.Errorf("output %q lacks %q", out, line)
		}
	}
	if code, out, _ := run(t, nil, "tenant", "quota", "t-1", "--max-memory-mib", "0"); code != 0 || !strings.Contains(out, "unlimited") || puts[1].MaxMemoryMiB != 0 || puts[1].MaxCPUs != 4 {
		t.Errorf("--max-memory-mib 0: exit %d, output %q, PUT %+v; want memory unlimited, CPUs kept", code, out, puts[1])
	}
	if code, _, _ := run(t, nil, "tenant", "quota", "t-1"); code != 0 || len(puts) != 2 {
		t.Errorf("tenant quota without flags: exit %d, %d PUTs; want a read only", code, len(puts))
	}
	if code, _, errOut := run(t, nil, "tenant", "quota", "t-9"); code != 1 || !strings.Contains(errOut, "does not exist") {
		t.Errorf("unknown tenant: exit %d, stderr %q", code, errOut)
	}
}
