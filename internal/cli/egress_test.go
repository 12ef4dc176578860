package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

const cliPolicy = `{"allow_internet": false, "allow": {"domains": ["pypi.org", "*.pythonhosted.org"], "ports": ["443"]}}`

var cliPolicyWant = sandboxv1.EgressPolicy{Allow: sandboxv1.EgressRules{Domains: []string{"pypi.org", "*.pythonhosted.org"}, Ports: []string{"443"}}}

// egressMux records the policy each create or PUT sent.
func egressMux(created, put *atomic.Pointer[sandboxv1.EgressPolicy]) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.CreateSandboxRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, err.Error())
			return
		}
		created.Store(req.Egress)
		writeJSONResp(w, 201, sandboxv1.Sandbox{ID: "sb-new", State: sandboxv1.StateRunning, Runtime: "vm", Egress: req.Egress})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/egress", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "sb-1" {
			writeErr(w, 404, sandboxv1.CodeNotFound, "sandbox not found")
			return
		}
		writeJSONResp(w, 200, sandboxv1.EgressPolicy{AllowInternet: true, Deny: sandboxv1.EgressRules{Ports: []string{"25"}}})
	})
	mux.HandleFunc("PUT /v1/sandboxes/{id}/egress", func(w http.ResponseWriter, r *http.Request) {
		var p sandboxv1.EgressPolicy
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, err.Error())
			return
		}
		put.Store(&p)
		if r.PathValue("id") == "sb-push-fails" {
			writeErr(w, 503, sandboxv1.CodeUnavailable, "the new egress policy is stored and applies at the next start")
			return
		}
		writeJSONResp(w, 200, p)
	})
	return mux
}

func writePolicyFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSandboxCreateEgress(t *testing.T) {
	var created, put atomic.Pointer[sandboxv1.EgressPolicy]
	fakeServer(t, egressMux(&created, &put))

	code, out, errOut := run(t, nil, "sandbox", "create", "--egress", writePolicyFile(t, cliPolicy))
	if code != 0 || out != "sb-new\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got := created.Load(); got == nil || !reflect.DeepEqual(*got, cliPolicyWant) {
		t.Errorf("create sent egress %+v, want %+v", got, cliPolicyWant)
	}

	created.Store(nil)
	code, _, errOut = run(t, strings.NewReader(cliPolicy), "sandbox", "create", "--egress", "-")
	if got := created.Load(); code != 0 || got == nil || !reflect.DeepEqual(*got, cliPolicyWant) {
		t.Errorf("create --egress - : exit %d (%s), sent %+v", code, errOut, got)
	}

	// Without --egress the request has no policy: the server's default.
	created.Store(&sandboxv1.EgressPolicy{})
	if code, _, errOut := run(t, nil, "sandbox", "create"); code != 0 || created.Load() != nil {
		t.Errorf("create without --egress: exit %d (%s), sent %+v; want no policy", code, errOut, created.Load())
	}

	for name, content := range map[string]string{
		"misspelt field": `{"alow": {"domains": ["a.com"]}}`,
		"two objects":    `{} {}`,
		"not JSON":       `allow everything`,
	} {
		created.Store(nil)
		code, _, errOut := run(t, nil, "sandbox", "create", "--egress", writePolicyFile(t, content))
		if code != 1 || !strings.Contains(errOut, "--egress") || created.Load() != nil {
			t.Errorf("%s: exit %d, stderr %q, sent %+v; want exit 1 naming --egress and no request", name, code, errOut, created.Load())
		}
	}
	if code, _, errOut := run(t, nil, "sandbox", "create", "--egress", filepath.Join(t.TempDir(), "missing.json")); code != 1 || !strings.Contains(errOut, "missing.json") {
		t.Errorf("missing file: exit %d, stderr %q", code, errOut)
	}
}

func TestSandboxEgressCommand(t *testing.T) {
	var created, put atomic.Pointer[sandboxv1.EgressPolicy]
	fakeServer(t, egressMux(&created, &put))

	code, out, errOut := run(t, nil, "sandbox", "egress", "sb-1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got sandboxv1.EgressPolicy
	if err := json.Unmarshal([]byte(out), &got); err != nil || !got.AllowInternet || !reflect.DeepEqual(got.Deny.Ports, []string{"25"}) {
		t.Errorf("printed %q (%v), want the policy as JSON", out, err)
	}

	code, out, errOut = run(t, nil, "sandbox", "egress", "sb-1", "--set", writePolicyFile(t, cliPolicy))
	if code != 0 {
		t.Fatalf("--set: exit %d: %s", code, errOut)
	}
	if p := put.Load(); p == nil || !reflect.DeepEqual(*p, cliPolicyWant) {
		t.Errorf("PUT sent %+v, want %+v", p, cliPolicyWant)
	}
	got = sandboxv1.EgressPolicy{}
	if err := json.Unmarshal([]byte(out), &got); err != nil || !reflect.DeepEqual(got, cliPolicyWant) {
		t.Errorf("--set printed %q, want the stored policy", out)
	}

	put.Store(nil)
	code, _, errOut = run(t, strings.NewReader(`{"allow_internet": true}`), "sandbox", "egress", "sb-push-fails", "--set", "-")
	if code != 1 || !strings.Contains(errOut, "applies at the next start") || put.Load() == nil || !put.Load().AllowInternet {
		t.Errorf("push failing: exit %d, stderr %q, sent %+v; want exit 1 with the server's message", code, errOut, put.Load())
	}

	if code, _, _ := run(t, nil, "sandbox", "egress"); code != 2 {
		t.Errorf("no ID: exit %d, want 2", code)
	}
	if code, _, errOut := run(t, nil, "sandbox", "egress", "sb-missing"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("missing sandbox: exit %d, stderr %q", code, errOut)
	}
}

func TestTemplateEgressCommand(t *testing.T) {
	var gotBody atomic.Pointer[string]
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/templates/{name}/egress", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s := r.PathValue("name") + " " + strings.TrimSpace(string(b))
		gotBody.Store(&s)
		json.NewEncoder(w).Encode(sandboxv1.Template{Name: r.PathValue("name"), State: "ready"})
	})
	fakeServer(t, mux)
	if code, _, errOut := run(t, nil, "template", "egress", "base", "--set", writePolicyFile(t, cliPolicy)); code != 0 {
		t.Fatalf("--set: exit %d: %s", code, errOut)
	}
	var sent sandboxv1.EgressPolicy
	name, body, _ := strings.Cut(*gotBody.Load(), " ")
	if err := json.Unmarshal([]byte(body), &sent); name != "base" || err != nil || !reflect.DeepEqual(sent, cliPolicyWant) {
		t.Errorf("sent %s %s (%v), want %+v", name, body, err, cliPolicyWant)
	}
	if code, _, errOut := run(t, nil, "template", "egress", "base", "--clear"); code != 0 || *gotBody.Load() != "base null" {
		t.Errorf("--clear: exit %d (%s), sent %q", code, errOut, *gotBody.Load())
	}
	if code, _, _ := run(t, nil, "template", "egress", "base"); code != 2 {
		t.Errorf("neither --set nor --clear: exit %d, want 2", code)
	}
}
