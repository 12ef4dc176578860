package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/api/node/v1/nodeapi/nodeapiv1connect"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/connecterr"
	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/credentials/localstore"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// syncBuffer is a bytes.Buffer safe for the server's concurrent logging.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// credPlane is a control plane with a real encrypted credential store, a
// file audit log and a CA sealer, all in t.TempDir(), and a clock the
// credential manager reads that tests can move forward.
type credPlane struct {
	*controlPlane
	logs    *syncBuffer
	backend *localstore.Store
	audit   *credentials.FileAuditLog
	skew    *atomic.Int64 // added to time.Now by the manager's clock
	// bodies collects every answer of the public API the test read.
	bodies *syncBuffer
}

// credentialStores opens, in dir, what a control plane with credentials
// needs: the encrypted credential store, its audit log and the CA sealer.
func credentialStores(t *testing.T, dir string) (*localstore.Store, *credentials.FileAuditLog, *CASealer) {
	t.Helper()
	keyPath := filepath.Join(dir, "credentials.key")
	if err := localstore.GenerateKeyFile(keyPath); err != nil {
		t.Fatal(err)
	}
	backend, err := localstore.Open(filepath.Join(dir, "credentials"), keyPath)
	if err != nil {
		t.Fatal(err)
	}
	audit, err := credentials.OpenFileAuditLog(filepath.Join(dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { audit.Close() })
	sealer, err := OpenCASealer(filepath.Join(dir, "ca-seal.key"))
	if err != nil {
		t.Fatal(err)
	}
	return backend, audit, sealer
}

func newCredPlane(t *testing.T) *credPlane {
	t.Helper()
	backend, audit, sealer := credentialStores(t, t.TempDir())
	skew := &atomic.Int64{}
	mgr := credentials.NewManager(backend, audit, credentials.WithClock(func() time.Time {
		return time.Now().Add(time.Duration(skew.Load()))
	}))
	logs := &syncBuffer{}
	cp := newControlPlaneLog(t, Config{Credentials: mgr, CredentialStore: backend, CredentialAudit: audit, CASealer: sealer}, logs)
	return &credPlane{controlPlane: cp, logs: logs, backend: backend, audit: audit, skew: skew, bodies: &syncBuffer{}}
}

// call sends a public API request and returns status and raw answer,
// keeping the answer for the secret checks.
func (cp *credPlane) call(t *testing.T, key, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, cp.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Fprintf(cp.bodies, "%s %s -> %d %s\n", method, path, resp.StatusCode, b)
	return resp.StatusCode, b
}

// createCred creates a credential from body and returns it.
func (cp *credPlane) createCred(t *testing.T, key, body string) sandboxv1.Credential {
	t.Helper()
	code, b := cp.call(t, key, http.MethodPost, "/v1/credentials", body)
	if code != http.StatusCreated {
		t.Fatalf("create credential %s: HTTP %d %s", body, code, b)
	}
	var c sandboxv1.Credential
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// resolveStatusOf is the status and code the JSON resolve route of node
// API v1 answered err with, which these tests were written against: 503
// store or audit log down, 412 all expired, 429 rate limited, else the
// usual ones.
func resolveStatusOf(err error) (int, string) {
	switch {
	case errors.Is(err, errdefs.ErrUnavailable):
		return http.StatusServiceUnavailable, sandboxv1.CodeUnavailable
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		return http.StatusPreconditionFailed, sandboxv1.CodeFailedPrecondition
	case errors.Is(err, errdefs.ErrRateLimited):
		return http.StatusTooManyRequests, sandboxv1.CodeRateLimited
	}
	return statusOf(err)
}

// resolve asks as node nodeID with token; it returns the status, the
// answer and the API error.
func (cp *credPlane) resolve(t *testing.T, token, nodeID string, req nodev1.ResolveCredential) (int, nodev1.ResolvedCredential, sandboxv1.Error) {
	t.Helper()
	creq := connect.NewRequest(req.ToWire(nodeID))
	if token != "" {
		creq.Header().Set("Authorization", "Bearer "+token)
	}
	resp, err := nodeapiv1connect.NewControlPlaneServiceClient(http.DefaultClient, cp.url).ResolveCredential(t.Context(), creq)
	if err != nil {
		err = connecterr.Decode(err)
		var ce *connecterr.Error
		if !errors.As(err, &ce) {
			t.Fatal(err)
		}
		status, code := resolveStatusOf(err)
		return status, nodev1.ResolvedCredential{}, sandboxv1.Error{Code: code, Message: err.Error(), Reason: string(errdefs.ReasonOf(err))}
	}
	return http.StatusOK, nodev1.ResolvedCredentialFromWire(resp.Msg), sandboxv1.Error{}
}

func (cp *credPlane) auditEntries(t *testing.T, key, query string) []sandboxv1.CredentialAuditEntry {
	t.Helper()
	code, b := cp.call(t, key, http.MethodGet, "/v1/credentials/audit"+query, "")
	if code != http.StatusOK {
		t.Fatalf("audit%s: HTTP %d %s", query, code, b)
	}
	var list sandboxv1.CredentialAuditList
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	return list.Entries
}

// wantNoSecret fails if secret, or its base64, is in the logs, the
// answers of the public API or the events of sandboxes.
func (cp *credPlane) wantNoSecret(t *testing.T, secret string, sandboxes ...string) {
	t.Helper()
	forms := []string{secret, base64.StdEncoding.EncodeToString([]byte(secret))}
	events := &strings.Builder{}
	for _, id := range sandboxes {
		_, b := cp.call(t, cp.key, http.MethodGet, "/v1/sandboxes/"+id+"/events", "")
		events.Write(b)
	}
	for _, f := range forms {
		if strings.Contains(cp.logs.String(), f) {
			t.Errorf("the secret (%q form) is in the server log", f[:4])
		}
		if strings.Contains(cp.bodies.String(), f) {
			t.Errorf("the secret (%q form) is in an API answer", f[:4])
		}
		if strings.Contains(events.String(), f) {
			t.Errorf("the secret (%q form) is in a sandbox event", f[:4])
		}
	}
}

const testSecret = "Bearer ghp_s3cr3t-value-that-must-never-leak-0123456789"

func TestCredentialsCRUD(t *testing.T) {
	cp := newCredPlane(t)
	sb := cp.with(t).create(`{"template":"minimal"}`)
	exp := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	body := fmt.Sprintf(`{"name":"github","secret":%q,"injection":{"method":"header","name":"Authorization"},
		"allowed_hosts":["api.github.com","*.githubusercontent.com"],"expires_at":%q,"rate_limit":30,"sandbox":%q,"project":"web"}`,
		testSecret, exp.Format(time.RFC3339), sb.ID)
	c := cp.createCred(t, cp.key, body)
	if !strings.HasPrefix(c.ID, "cr-") || c.Name != "github" || c.Injection != (sandboxv1.CredentialInjection{Method: "header", Name: "Authorization"}) ||
		c.Scope != (sandboxv1.CredentialScope{Tenant: cp.tenant, Project: "web", Sandbox: sb.ID}) || c.RateLimit != 30 ||
		c.ExpiresAt == nil || !c.ExpiresAt.Equal(exp) || len(c.AllowedHosts) != 2 || c.CreatedAt.IsZero() {
		t.Errorf("created credential = %+v", c)
	}
	tenantWide := cp.createCred(t, cp.key, `{"name":"npm","secret":"user:pass","injection":{"method":"basic"},"allowed_hosts":["registry.npmjs.org"]}`)
	if tenantWide.Scope != (sandboxv1.CredentialScope{Tenant: cp.tenant}) || tenantWide.ExpiresAt != nil {
		t.Errorf("tenant-wide credential = %+v", tenantWide)
	}

	var list sandboxv1.CredentialList
	code, b := cp.call(t, cp.key, http.MethodGet, "/v1/credentials", "")
	if err := json.Unmarshal(b, &list); code != http.StatusOK || err != nil {
		t.Fatalf("list: HTTP %d %s", code, b)
	}
	if len(list.Credentials) != 2 || list.Credentials[0].ID != c.ID || list.Credentials[1].ID != tenantWide.ID {
		t.Errorf("list = %+v, want [%s %s]", list.Credentials, c.ID, tenantWide.ID)
	}
	var got sandboxv1.Credential
	code, b = cp.call(t, cp.key, http.MethodGet, "/v1/credentials/"+c.ID, "")
	if err := json.Unmarshal(b, &got); code != http.StatusOK || err != nil || got.ID != c.ID || got.Scope != c.Scope || !got.ExpiresAt.Equal(exp) {
		t.Errorf("get: HTTP %d %s", code, b)
	}

	// Another tenant sees nothing, and cannot delete.
	code, b = cp.call(t, cp.other, http.MethodGet, "/v1/credentials", "")
	if code != http.StatusOK || !strings.Contains(string(b), `"credentials":[]`) {
		t.Errorf("other tenant's list: HTTP %d %s", code, b)
	}
	for _, m := range []string{http.MethodGet, http.MethodDelete} {
		if code, b := cp.call(t, cp.other, m, "/v1/credentials/"+c.ID, ""); code != http.StatusNotFound {
			t.Errorf("other tenant %s: HTTP %d %s, want 404", m, code, b)
		}
	}
	// A non-admin key may not name another tenant.
	if code, _ := cp.call(t, cp.other, http.MethodGet, "/v1/credentials?tenant="+cp.tenant, ""); code != http.StatusForbidden {
		t.Errorf("non-admin ?tenant=: HTTP %d, want 403", code)
	}

	if code, b := cp.call(t, cp.key, http.MethodDelete, "/v1/credentials/"+c.ID, ""); code != http.StatusNoContent {
		t.Fatalf("delete: HTTP %d %s", code, b)
	}
	if code, _ := cp.call(t, cp.key, http.MethodGet, "/v1/credentials/"+c.ID, ""); code != http.StatusNotFound {
		t.Errorf("get after delete: HTTP %d, want 404", code)
	}
	if _, err := cp.backend.Get(t.Context(), c.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("backend still has the deleted credential: %v", err)
	}
	if code, _ := cp.call(t, cp.key, http.MethodDelete, "/v1/credentials/"+c.ID, ""); code != http.StatusNotFound {
		t.Errorf("delete again: HTTP %d, want 404", code)
	}
	cp.wantNoSecret(t, testSecret, sb.ID)
}

func TestCredentialValidation(t *testing.T) {
	cp := newCredPlane(t)
	foreign := cp.with(t).create(`{"template":"minimal"}`)
	var otherSB sandboxv1.Sandbox
	if code, e := cp.with(t).do(cp.other, http.MethodPost, "/v1/sandboxes", `{"template":"minimal"}`, &otherSB); code != http.StatusCreated {
		t.Fatalf("create other tenant's sandbox: %d %+v", code, e)
	}
	const secret = "tok-validation-secret-5f1e"
	base := func(edit string) string {
		return `{"name":"n","secret":"` + secret + `","injection":{"method":"header","name":"X-Api-Key"},"allowed_hosts":["api.example.com"]` + edit + `}`
	}
	for _, tc := range []struct {
		name, body string
		want       int
		reason     string
	}{
		{"no hosts", `{"name":"n","secret":"` + secret + `","injection":{"method":"header","name":"X-Api-Key"},"allowed_hosts":[]}`, 400, "allowed hosts"},
		{"too broad a wildcard", `{"name":"n","secret":"` + secret + `","injection":{"method":"header","name":"X-Api-Key"},"allowed_hosts":["*.com"]}`, 400, "wildcard"},
		{"unknown method", `{"name":"n","secret":"` + secret + `","injection":{"method":"cookie"},"allowed_hosts":["a.example"]}`, 400, "injection method"},
		{"framing header", `{"name":"n","secret":"` + secret + `","injection":{"method":"header","name":"Host"},"allowed_hosts":["a.example"]}`, 400, "frames the request"},
		{"basic without colon", `{"name":"n","secret":"` + secret + `","injection":{"method":"basic"},"allowed_hosts":["a.example"]}`, 400, "user:password"},
		{"header secret with a newline", `{"name":"n","secret":"` + secret + `\r\nX-Evil: 1","injection":{"method":"header","name":"X-Api-Key"},"allowed_hosts":["a.example"]}`, 400, "control character"},
		{"empty secret", `{"name":"n","secret":"","injection":{"method":"header","name":"X-Api-Key"},"allowed_hosts":["a.example"]}`, 400, "secret of 0 bytes"},
		{"no name", `{"secret":"` + secret + `","injection":{"method":"header","name":"X-Api-Key"},"allowed_hosts":["a.example"]}`, 400, "name"},
		{"expired already", base(`,"expires_at":"2001-01-01T00:00:00Z"`), 400, "not in the future"},
		{"negative rate limit", base(`,"rate_limit":-1`), 400, "rate limit"},
		{"bad project", base(`,"project":"a b"`), 400, "project"},
		{"unknown field", base(`,"value":"x"`), 400, "unknown field"},
		{"bad expiry format", base(`,"expires_at":"tomorrow"`), 400, "malformed"},
		{"another tenant's sandbox", base(`,"sandbox":"` + otherSB.ID + `"`), 404, "sandbox"},
		{"malformed sandbox id", base(`,"sandbox":"../x"`), 404, "sandbox"},
		{"another tenant (not admin)", base(`,"tenant":"t-someoneelse0000"`), 403, "admin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, b := cp.call(t, cp.key, http.MethodPost, "/v1/credentials", tc.body)
			if code != tc.want || !strings.Contains(string(b), tc.reason) {
				t.Errorf("HTTP %d %s; want %d with %q", code, b, tc.want, tc.reason)
			}
		})
	}
	// The own sandbox is accepted.
	cp.createCred(t, cp.key, base(`,"sandbox":"`+foreign.ID+`"`))
	cp.wantNoSecret(t, secret, foreign.ID)
}

func TestResolveCredential(t *testing.T) {
	cp := newCredPlane(t)
	sb := cp.with(t).create(`{"template":"minimal","project":"web"}`)
	if sb.Project != "web" {
		t.Fatalf("sandbox project = %q, want web", sb.Project)
	}
	cur, err := cp.st.GetSandboxByID(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	cred := cp.createCred(t, cp.key, fmt.Sprintf(`{"name":"gh","secret":%q,"injection":{"method":"header","name":"Authorization"},"allowed_hosts":["api.github.com"],"rate_limit":2,"project":"web"}`, testSecret))
	ask := nodev1.ResolveCredential{SandboxID: sb.ID, ExecID: cur.ExecID, Host: "API.github.com."}

	t.Run("authentication", func(t *testing.T) {
		for _, tok := range []string{"", "wrong-token"} {
			if code, _, _ := cp.resolve(t, tok, "n1", ask); code != http.StatusUnauthorized {
				t.Errorf("token %q: HTTP %d, want 401", tok, code)
			}
		}
		// An API key is not a node's credential, and the join token
		// only registers nodes.
		if code, _, _ := cp.resolve(t, cp.key, "n1", ask); code != http.StatusUnauthorized {
			t.Errorf("API key: HTTP %d, want 401", code)
		}
		if code, out, e := cp.resolve(t, testJoinToken, "n1", ask); code != http.StatusUnauthorized || len(out.Secret) != 0 {
			t.Errorf("join token: HTTP %d %+v, want 401", code, e)
		}
	})
	t.Run("a node is who its credential names", func(t *testing.T) {
		// Node n2, enrolled, runs none of n1's executions: its own
		// credential is refused for them (403), and n1's credential does
		// not authenticate it as n1's path or n1 as n2 (401).
		n2 := cp.with(t).credentialOf("n2")
		if n2 == cp.nodeCred {
			t.Fatalf("n1 and n2 have the same credential %q", n2)
		}
		if code, out, e := cp.resolve(t, n2, "n2", ask); code != http.StatusForbidden || len(out.Secret) != 0 || !strings.Contains(e.Message, "not placed on this node") {
			t.Errorf("n2 for n1's execution: HTTP %d %+v, want 403", code, e)
		}
		if code, out, e := cp.resolve(t, n2, "n1", ask); code != http.StatusUnauthorized || len(out.Secret) != 0 {
			t.Errorf("n2's credential on n1's path: HTTP %d %+v, want 401", code, e)
		}
		if code, out, e := cp.resolve(t, cp.nodeCred, "n2", ask); code != http.StatusUnauthorized || len(out.Secret) != 0 {
			t.Errorf("n1's credential on n2's path: HTTP %d %+v, want 401", code, e)
		}
	})
	t.Run("only the execution's own node", func(t *testing.T) {
		stale := ask
		stale.ExecID = sb.ID + "-g0-stale00000000"
		for name, tc := range map[string]struct {
			node string
			req  nodev1.ResolveCredential
		}{
			"stale execution": {"n1", stale},
			"unknown sandbox": {"n1", nodev1.ResolveCredential{SandboxID: "zzzzzzzzzzzzzzzzzzzz", ExecID: cur.ExecID, Host: "api.github.com"}},
			"garbage ids":     {"n1", nodev1.ResolveCredential{SandboxID: "../../x", ExecID: "y", Host: "api.github.com"}},
		} {
			code, out, e := cp.resolve(t, cp.nodeCred, tc.node, tc.req)
			if code != http.StatusForbidden || len(out.Secret) != 0 || !strings.Contains(e.Message, "executions it runs") {
				t.Errorf("%s: HTTP %d %+v, want 403", name, code, e)
			}
		}
	})
	t.Run("check only", func(t *testing.T) {
		before := len(cp.auditEntries(t, cp.key, ""))
		check := ask
		check.CheckOnly = true
		code, out, e := cp.resolve(t, cp.nodeCred, "n1", check)
		if code != http.StatusOK || !out.Applies || len(out.Secret) != 0 {
			t.Errorf("check: HTTP %d %+v %+v; want applies without secret", code, out, e)
		}
		check.Host = "example.org"
		if code, out, _ := cp.resolve(t, cp.nodeCred, "n1", check); code != http.StatusOK || out.Applies {
			t.Errorf("check other host: HTTP %d applies=%t, want false", code, out.Applies)
		}
		if after := len(cp.auditEntries(t, cp.key, "")); after != before {
			t.Errorf("check-only wrote %d audit entries, want none", after-before)
		}
	})
	t.Run("resolve, audit, rate limit", func(t *testing.T) {
		code, out, e := cp.resolve(t, cp.nodeCred, "n1", ask)
		if code != http.StatusOK || string(out.Secret) != testSecret || out.ID != cred.ID || out.Method != "header" || out.Name != "Authorization" || !out.Applies {
			t.Fatalf("resolve: HTTP %d %+v %+v", code, out.ID, e)
		}
		entries := cp.auditEntries(t, cp.key, "?credential="+cred.ID)
		if len(entries) != 1 {
			t.Fatalf("audit entries for %s = %+v, want 1", cred.ID, entries)
		}
		if a := entries[0]; !a.Allowed || a.Sandbox != sb.ID || a.ExecutionID != cur.ExecID || a.Host != "api.github.com" ||
			a.Tenant != cp.tenant || a.Project != "web" || a.Reason != credentials.ReasonResolved || a.Time.IsZero() {
			t.Errorf("audit entry = %+v", a)
		}
		// The second of two per minute still passes; the third is refused.
		if code, _, _ := cp.resolve(t, cp.nodeCred, "n1", ask); code != http.StatusOK {
			t.Fatalf("second resolve: HTTP %d", code)
		}
		code, out, e = cp.resolve(t, cp.nodeCred, "n1", ask)
		if code != http.StatusTooManyRequests || e.Code != sandboxv1.CodeRateLimited || e.Reason != "rate_limited" || len(out.Secret) != 0 {
			t.Errorf("third resolve: HTTP %d %+v, want 429 rate_limited", code, e)
		}
		entries = cp.auditEntries(t, cp.key, "?sandbox="+sb.ID+"&limit=1")
		if len(entries) != 1 || entries[0].Allowed || entries[0].Reason != credentials.ReasonRateLimited {
			t.Errorf("newest audit entry = %+v, want the rate-limited refusal", entries)
		}
	})
	t.Run("redaction report", func(t *testing.T) {
		rep := ask
		rep.Redaction = &nodev1.CredentialRedaction{CredentialID: cred.ID, Where: "body", Count: 2}
		code, out, e := cp.resolve(t, cp.nodeCred, "n1", rep)
		if code != http.StatusOK || len(out.Secret) != 0 {
			t.Fatalf("redaction report: HTTP %d %+v %+v, want 200 without a secret", code, out, e)
		}
		entries := cp.auditEntries(t, cp.key, "?sandbox="+sb.ID+"&limit=1")
		if len(entries) != 1 || entries[0].Kind != credentials.KindRedaction || entries[0].CredentialID != cred.ID ||
			entries[0].Where != "body" || entries[0].Count != 2 || entries[0].Host != "api.github.com" || entries[0].ExecutionID != cur.ExecID {
			t.Errorf("newest audit entry = %+v, want the redaction", entries)
		}
		rep.Redaction.Where = "elsewhere"
		if code, _, _ := cp.resolve(t, cp.nodeCred, "n1", rep); code != http.StatusBadRequest {
			t.Errorf("malformed redaction report: HTTP %d, want 400", code)
		}
		rep.Redaction.Where = "body"
		if code, _, _ := cp.resolve(t, cp.with(t).credentialOf("n2"), "n2", rep); code != http.StatusForbidden {
			t.Errorf("a redaction report from another node: HTTP %d, want 403", code)
		}
	})
	t.Run("host not allowed", func(t *testing.T) {
		other := ask
		other.Host = "evil.example.com"
		if code, _, e := cp.resolve(t, cp.nodeCred, "n1", other); code != http.StatusForbidden || !strings.Contains(e.Message, "allows host") {
			t.Errorf("other host: HTTP %d %+v, want 403", code, e)
		}
	})
	t.Run("no credential in scope", func(t *testing.T) {
		var osb sandboxv1.Sandbox
		if code, e := cp.with(t).do(cp.other, http.MethodPost, "/v1/sandboxes", `{"template":"minimal"}`, &osb); code != http.StatusCreated {
			t.Fatalf("create: %d %+v", code, e)
		}
		o, _ := cp.st.GetSandboxByID(t.Context(), osb.ID)
		code, _, _ := cp.resolve(t, cp.nodeCred, "n1", nodev1.ResolveCredential{SandboxID: o.ID, ExecID: o.ExecID, Host: "api.github.com"})
		if code != http.StatusNotFound {
			t.Errorf("other tenant's sandbox: HTTP %d, want 404", code)
		}
		// And its audit entry is not the first tenant's to see.
		for _, a := range cp.auditEntries(t, cp.key, "") {
			if a.Sandbox == o.ID || a.Tenant != cp.tenant {
				t.Errorf("tenant sees another tenant's audit entry %+v", a)
			}
		}
		if got := cp.auditEntries(t, cp.other, ""); len(got) != 1 || got[0].Sandbox != o.ID {
			t.Errorf("other tenant's audit = %+v, want its one refusal", got)
		}
	})
	t.Run("expired", func(t *testing.T) {
		exp := cp.createCred(t, cp.key, fmt.Sprintf(`{"name":"short","secret":"x-expiring","injection":{"method":"query","name":"key"},"allowed_hosts":["maps.example.com"],"expires_at":%q}`,
			time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))
		cp.skew.Store(int64(2 * time.Hour))
		defer cp.skew.Store(0)
		code, _, e := cp.resolve(t, cp.nodeCred, "n1", nodev1.ResolveCredential{SandboxID: sb.ID, ExecID: cur.ExecID, Host: "maps.example.com"})
		if code != http.StatusPreconditionFailed || e.Code != sandboxv1.CodeFailedPrecondition {
			t.Errorf("expired: HTTP %d %+v, want 412", code, e)
		}
		check := nodev1.ResolveCredential{SandboxID: sb.ID, ExecID: cur.ExecID, Host: "maps.example.com", CheckOnly: true}
		if code, out, _ := cp.resolve(t, cp.nodeCred, "n1", check); code != http.StatusOK || out.Applies {
			t.Errorf("check of an expired credential: HTTP %d applies=%t, want false", code, out.Applies)
		}
		// The refusal names no credential (none applied), but says why.
		if got := cp.auditEntries(t, cp.key, "?sandbox="+sb.ID+"&limit=1"); len(got) != 1 || got[0].Allowed || got[0].Reason != credentials.ReasonExpired {
			t.Errorf("newest audit entry = %+v, want the expiry refusal", got)
		}
		if got := cp.auditEntries(t, cp.key, "?credential="+exp.ID); len(got) != 0 {
			t.Errorf("audit entries naming the expired credential %s = %+v, want none", exp.ID, got)
		}
	})
	t.Run("audit query bounds", func(t *testing.T) {
		for _, l := range []string{"0", "1001", "-3", "x"} {
			if code, _ := cp.call(t, cp.key, http.MethodGet, "/v1/credentials/audit?limit="+l, ""); code != http.StatusBadRequest {
				t.Errorf("limit=%s: HTTP %d, want 400", l, code)
			}
		}
		all := cp.auditEntries(t, cp.key, "")
		for i := 1; i < len(all); i++ {
			if all[i].Time.After(all[i-1].Time) {
				t.Errorf("audit not newest first at %d: %v after %v", i, all[i].Time, all[i-1].Time)
			}
		}
	})
	cp.wantNoSecret(t, testSecret, sb.ID)
	if !strings.Contains(cp.logs.String(), "REDACTED") {
		t.Error("the create was not logged (with its secret redacted)")
	}
}

// TestResolveStoreDown: a failing audit log refuses the credential: 503.
func TestResolveStoreDown(t *testing.T) {
	cp := newCredPlane(t)
	sb := cp.with(t).create(`{"template":"minimal"}`)
	cur, _ := cp.st.GetSandboxByID(t.Context(), sb.ID)
	cp.createCred(t, cp.key, `{"name":"n","secret":"s3-long-enough","injection":{"method":"header","name":"X-K"},"allowed_hosts":["a.example.com"]}`)
	cp.audit.Close()
	code, out, e := cp.resolve(t, cp.nodeCred, "n1", nodev1.ResolveCredential{SandboxID: sb.ID, ExecID: cur.ExecID, Host: "a.example.com"})
	if code != http.StatusServiceUnavailable || len(out.Secret) != 0 {
		t.Errorf("audit log closed: HTTP %d %+v, want 503 without a secret", code, e)
	}
}

// TestDeleteTenantPurgesCredentials: a deleted tenant's credentials leave
// the backend too.
func TestDeleteTenantPurgesCredentials(t *testing.T) {
	cp := newCredPlane(t)
	admin := store.Tenant{ID: sandbox.NewTenantID(), Name: "admin", CreatedAt: time.Now().UTC()}
	if err := cp.st.CreateTenant(t.Context(), admin); err != nil {
		t.Fatal(err)
	}
	_, adminKey, err := service.MintKey(t.Context(), cp.st, admin.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	c := cp.createCred(t, cp.other, `{"name":"n","secret":"s3-long-enough","injection":{"method":"header","name":"X-K"},"allowed_hosts":["a.example.com"]}`)
	otherTenant := c.Scope.Tenant
	if code, b := cp.call(t, adminKey, http.MethodDelete, "/v1/tenants/"+otherTenant, ""); code != http.StatusNoContent {
		t.Fatalf("delete tenant: HTTP %d %s", code, b)
	}
	if _, err := cp.backend.Get(t.Context(), c.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("backend still has the deleted tenant's credential: %v", err)
	}
}
