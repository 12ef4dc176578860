package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchSustainedAgainstServer runs `space bench sustained` against a
// real `space server --dev`: two clients loop create+delete, the report has
// creates/s above zero, no failed operation, the machine's CPU per
// create+delete (the server is on this host), and the run leaves no
// sandbox behind.
func TestBenchSustainedAgainstServer(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	out, errOut, code := in.cli("", "bench", "sustained", "--clients", "2", "--duration", "3s", "--runtime", "ns", "-o", "json")
	if code != 0 {
		t.Fatalf("space bench sustained: exit %d\n%s\n%s\n%s", code, out, errOut, in.logs())
	}
	var rep struct {
		Scenarios map[string]struct {
			N       int      `json:"n"`
			OpsPerS float64  `json:"ops_per_s"`
			P50MS   float64  `json:"p50_ms"`
			CPUMS   *float64 `json:"cpu_ms_per_op"`
		} `json:"scenarios"`
		Notes map[string]string `json:"notes"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bench JSON: %v\n%s", err, out)
	}
	cr, del := rep.Scenarios["sustained_create"], rep.Scenarios["sustained_delete"]
	if cr.N < 1 || cr.OpsPerS <= 0 || cr.P50MS <= 0 {
		t.Errorf("sustained_create = %+v, want creates/s > 0\n%s", cr, out)
	}
	if del.N != cr.N || del.P50MS <= 0 {
		t.Errorf("sustained_delete = %+v, want one delete per create (%d)", del, cr.N)
	}
	if cr.CPUMS == nil || *cr.CPUMS <= 0 {
		t.Errorf("no machine CPU per create+delete: %s", out)
	}
	if note := rep.Notes["sustained_create"]; !strings.HasSuffix(note, "errors: none") {
		t.Errorf("note %q, want no errors", note)
	}
	var list struct{ Sandboxes []sandbox }
	in.do("GET", "/v1/sandboxes", nil, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("sandboxes left after the bench: %+v", list.Sandboxes)
	}
}
