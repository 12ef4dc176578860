package cli

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// credentialMux records what the credential commands sent.
type credentialMux struct {
	mu      sync.Mutex // guards the fields below
	created []sandboxv1.CreateCredentialRequest
	deleted []string
	audit   []string // raw queries
}

func (c *credentialMux) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/credentials", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.CreateCredentialRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, err.Error())
			return
		}
		c.mu.Lock()
		c.created = append(c.created, req)
		c.mu.Unlock()
		writeJSONResp(w, 201, sandboxv1.Credential{ID: "cr-0001", Name: req.Name, Scope: sandboxv1.CredentialScope{Tenant: "t-1", Sandbox: req.Sandbox, Project: req.Project},
			Injection: req.Injection, AllowedHosts: req.AllowedHosts, CreatedAt: created})
	})
	mux.HandleFunc("GET /v1/credentials", func(w http.ResponseWriter, r *http.Request) {
		exp := created.Add(time.Hour)
		writeJSONResp(w, 200, sandboxv1.CredentialList{Credentials: []sandboxv1.Credential{
			{ID: "cr-0001", Name: "github", Scope: sandboxv1.CredentialScope{Tenant: "t-1"}, Injection: sandboxv1.CredentialInjection{Method: "header", Name: "Authorization"},
				AllowedHosts: []string{"api.github.com"}, ExpiresAt: &exp, RateLimit: 60, CreatedAt: created},
			{ID: "cr-0002", Name: "npm", Scope: sandboxv1.CredentialScope{Tenant: "t-1", Sandbox: "sbx1"}, Injection: sandboxv1.CredentialInjection{Method: "basic"},
				AllowedHosts: []string{"registry.npmjs.org", "*.npmjs.org"}, CreatedAt: created},
		}})
	})
	mux.HandleFunc("DELETE /v1/credentials/{id}", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.deleted = append(c.deleted, r.PathValue("id"))
		c.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/credentials/audit", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.audit = append(c.audit, r.URL.RawQuery)
		c.mu.Unlock()
		writeJSONResp(w, 200, sandboxv1.CredentialAuditList{Entries: []sandboxv1.CredentialAuditEntry{
			{Time: created, Tenant: "t-1", Sandbox: "sbx1", ExecutionID: "sbx1-g1-x", Host: "api.github.com", CredentialID: "cr-0001", Allowed: false, Reason: "rate limited"},
			{Time: created, Tenant: "t-1", Sandbox: "sbx1", ExecutionID: "sbx1-g1-x", Host: "api.github.com", CredentialID: "cr-0001", Kind: "redaction",
				Reason: "secret removed from the response", Where: "body", Count: 2},
		}})
	})
	return mux
}

func (c *credentialMux) last(t *testing.T) sandboxv1.CreateCredentialRequest {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.created) == 0 {
		t.Fatal("no create request reached the server")
	}
	return c.created[len(c.created)-1]
}

func TestCredentialCreate(t *testing.T) {
	cm := &credentialMux{}
	fakeServer(t, cm.mux())
	const secret = "Bearer ghp_topsecret"
	code, out, errOut := run(t, strings.NewReader(secret+"\n"), "credential", "create", "--name", "github",
		"--host", "api.github.com", "--host", "*.githubusercontent.com", "--header", "Authorization", "--rate-limit", "60",
		"--sandbox", "sbx1", "--expires", "24h")
	if code != 0 || out != "cr-0001\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	got := cm.last(t)
	if got.Secret != secret || got.Name != "github" || got.Injection != (sandboxv1.CredentialInjection{Method: "header", Name: "Authorization"}) ||
		strings.Join(got.AllowedHosts, ",") != "api.github.com,*.githubusercontent.com" || got.RateLimit != 60 || got.Sandbox != "sbx1" {
		t.Errorf("sent %+v", got)
	}
	if got.ExpiresAt == nil || got.ExpiresAt.Sub(time.Now()) < 23*time.Hour || got.ExpiresAt.Sub(time.Now()) > 25*time.Hour {
		t.Errorf("--expires 24h sent %v", got.ExpiresAt)
	}
	if strings.Contains(out+errOut, "topsecret") {
		t.Error("the secret was printed")
	}

	code, _, errOut = run(t, strings.NewReader("user:pa\r\n"), "credential", "create", "--name", "npm", "--host", "registry.npmjs.org",
		"--basic", "--project", "web", "--expires", "2031-05-06T07:08:09Z")
	got = cm.last(t)
	if code != 0 || got.Secret != "user:pa" || got.Injection.Method != "basic" || got.Project != "web" ||
		got.ExpiresAt == nil || !got.ExpiresAt.Equal(time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)) {
		t.Errorf("basic: exit %d (%s), sent %+v", code, errOut, got)
	}
	code, _, _ = run(t, strings.NewReader("k"), "credential", "create", "--name", "maps", "--host", "maps.example.com", "--query", "key")
	if got = cm.last(t); code != 0 || got.Injection != (sandboxv1.CredentialInjection{Method: "query", Name: "key"}) {
		t.Errorf("query: exit %d, sent %+v", code, got)
	}

	before := len(cm.created)
	for name, tc := range map[string]struct {
		stdin string
		args  []string
		want  string
	}{
		"no host":        {"s", []string{"--name", "n", "--header", "X"}, "--host"},
		"no name":        {"s", []string{"--host", "a.example", "--header", "X"}, "--name"},
		"no method":      {"s", []string{"--name", "n", "--host", "a.example"}, "exactly one"},
		"two methods":    {"s", []string{"--name", "n", "--host", "a.example", "--header", "X", "--basic"}, "exactly one"},
		"no secret":      {"", []string{"--name", "n", "--host", "a.example", "--header", "X"}, "no secret on stdin"},
		"secret too big": {strings.Repeat("s", maxSecretInput+1), []string{"--name", "n", "--host", "a.example", "--header", "X"}, "over"},
		"bad expiry":     {"s", []string{"--name", "n", "--host", "a.example", "--header", "X", "--expires", "soon"}, "--expires"},
		"past duration":  {"s", []string{"--name", "n", "--host", "a.example", "--header", "X", "--expires", "-1h"}, "positive"},
		"secret in argv": {"s", []string{"--name", "n", "--host", "a.example", "--header", "X", "--secret", "oops"}, "secret"},
	} {
		code, _, errOut := run(t, strings.NewReader(tc.stdin), append([]string{"credential", "create"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want a failure mentioning %q", name, code, errOut, tc.want)
		}
	}
	if len(cm.created) != before {
		t.Errorf("%d invalid creates reached the server", len(cm.created)-before)
	}
}

func TestCredentialListDeleteAudit(t *testing.T) {
	cm := &credentialMux{}
	fakeServer(t, cm.mux())
	code, out, errOut := run(t, nil, "credential", "list")
	if code != 0 {
		t.Fatalf("list: exit %d %s", code, errOut)
	}
	for _, want := range []string{"cr-0001", "github", "header Authorization", "api.github.com", "60/min", "sandbox sbx1", "registry.npmjs.org,*.npmjs.org", "tenant"} {
		if !strings.Contains(out, want) {
			t.Errorf("list output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = run(t, nil, "credential", "list", "-o", "json")
	var list sandboxv1.CredentialList
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Credentials) != 2 {
		t.Errorf("list -o json: exit %d, %v, %q", code, err, out)
	}

	if code, _, errOut := run(t, nil, "credential", "delete", "cr-0002"); code != 0 || len(cm.deleted) != 1 || cm.deleted[0] != "cr-0002" {
		t.Errorf("delete: exit %d (%s), deleted %v", code, errOut, cm.deleted)
	}
	if code, _, _ := run(t, nil, "credential", "delete"); code == 0 {
		t.Error("delete without an id succeeded")
	}

	code, out, errOut = run(t, nil, "credential", "audit", "--sandbox", "sbx1", "--credential", "cr-0001", "--limit", "5")
	if code != 0 || !strings.Contains(out, "rate limited") || !strings.Contains(out, "denied") || !strings.Contains(out, "api.github.com") ||
		!strings.Contains(out, "redacted") || !strings.Contains(out, "secret removed from the response (body, 2×)") {
		t.Errorf("audit: exit %d (%s):\n%s", code, errOut, out)
	}
	if len(cm.audit) != 1 || cm.audit[0] != "credential=cr-0001&limit=5&sandbox=sbx1" {
		t.Errorf("audit query = %v", cm.audit)
	}
	if code, _, _ := run(t, nil, "credential", "audit", "--limit", "5000"); code == 0 {
		t.Error("--limit 5000 accepted")
	}
}
