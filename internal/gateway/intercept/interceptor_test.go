package intercept

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
)

func (h *harness) onlySeen() seen {
	h.t.Helper()
	got := h.seen()
	if len(got) != 1 {
		h.t.Fatalf("upstream saw %d requests, want 1", len(got))
	}
	return got[0]
}

func TestHeaderInjection(t *testing.T) {
	h := newHarness(t)
	c, _ := h.client(flowFor("api.example.com"))
	req := newRequest(t, "GET", "https://api.example.com/v1/models?x=1", nil)
	req.Header["X-Api-Key"] = []string{placeholder, "second"}
	req.Header["x-api-key"] = []string{"lowercase"}
	req.Header.Set("X-Other", "kept")
	req.Header.Set("Connection", "X-Api-Key") // naming it hop-by-hop does not drop the credential
	resp, body := h.do(c, req)
	if resp.StatusCode != 200 || body != "upstream ok\n" {
		t.Fatalf("got %d %q, want 200 from the upstream", resp.StatusCode, body)
	}
	s := h.onlySeen()
	if got := s.Header.Values("X-Api-Key"); len(got) != 1 || got[0] != secretHeader {
		t.Errorf("upstream X-Api-Key = %q, want only the secret", got)
	}
	if v := s.Header["x-api-key"]; v != nil {
		t.Errorf("upstream got the guest's lower-case key %q", v)
	}
	if got := s.Header.Get("X-Other"); got != "kept" {
		t.Errorf("X-Other = %q, want kept", got)
	}
	if s.Host != "api.example.com" || s.Query != "x=1" {
		t.Errorf("upstream Host %q query %q", s.Host, s.Query)
	}
	entries := h.audit.Entries()
	if len(entries) != 1 || !entries[0].Allowed || entries[0].CredentialID != "c-header" ||
		entries[0].Host != "api.example.com" || entries[0].Sandbox != "sb1" || entries[0].ExecutionID != "e1" {
		t.Errorf("audit = %+v, want one allowed use of c-header by sb1/e1", entries)
	}
	if !strings.Contains(h.logs.String(), "credential=c-header") {
		t.Errorf("log does not name the credential used:\n%s", h.logs.String())
	}
}

func TestBasicInjection(t *testing.T) {
	h := newHarness(t)
	c, _ := h.client(flowFor("basic.example.com"))
	req := newRequest(t, "GET", "https://basic.example.com/", nil)
	req.SetBasicAuth("guest", placeholder)
	if resp, _ := h.do(c, req); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	s := h.onlySeen()
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+secretBasicPw))
	if got := s.Header.Values("Authorization"); len(got) != 1 || got[0] != want {
		t.Errorf("Authorization = %q, want %q", got, want)
	}
}

func TestQueryInjection(t *testing.T) {
	h := newHarness(t)
	c, _ := h.client(flowFor("query.example.com"))
	req := newRequest(t, "GET", "https://query.example.com/search?q=a+b&api_key="+placeholder+"&api%5Fkey=2&z=%2F", nil)
	if resp, _ := h.do(c, req); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	s := h.onlySeen()
	if want := "q=a+b&z=%2F&api_key=" + secretQuery; s.Query != want {
		t.Errorf("upstream query = %q, want %q", s.Query, want)
	}
}

func TestNoRuleForwardsUntouched(t *testing.T) {
	h := newHarness(t)
	// The rule was deleted after the gateway decided to intercept: Resolve
	// finds no credential for the host, and the request goes out as is.
	c, _ := h.client(flowFor("norule.example.com"))
	req := newRequest(t, "GET", "https://norule.example.com/", nil)
	req.Header.Set("X-Api-Key", "guest-own-value")
	if resp, _ := h.do(c, req); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	s := h.onlySeen()
	if got := s.Header.Get("X-Api-Key"); got != "guest-own-value" {
		t.Errorf("X-Api-Key = %q, want the guest's value", got)
	}
	if got := s.Header.Get("Authorization"); got != "" {
		t.Errorf("Authorization = %q, want none", got)
	}
	for k, v := range s.Header {
		for _, secret := range allSecrets {
			if strings.Contains(strings.Join(v, ","), secret) {
				t.Errorf("upstream header %s carries secret", k)
			}
		}
	}
	entries := h.audit.Entries()
	if len(entries) != 1 || entries[0].Allowed || entries[0].Reason != credentials.ReasonHostMismatch {
		t.Errorf("audit = %+v, want one refused resolution", entries)
	}
}

func TestRateLimited(t *testing.T) {
	h := newHarness(t)
	c, _ := h.client(flowFor("limited.example.com"))
	if resp, _ := h.do(c, newRequest(t, "GET", "https://limited.example.com/1", nil)); resp.StatusCode != 200 {
		t.Fatalf("first request: status %d, want 200", resp.StatusCode)
	}
	resp, body := h.do(c, newRequest(t, "POST", "https://limited.example.com/2", strings.NewReader("payload")))
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "rate limited") {
		t.Errorf("second request: %d %q, want 429 naming the rate limit", resp.StatusCode, body)
	}
	if n := len(h.seen()); n != 1 {
		t.Errorf("upstream saw %d requests, want 1 (the limited one is answered locally)", n)
	}
	entries := h.audit.Entries()
	if len(entries) != 2 || !entries[0].Allowed || entries[1].Allowed || entries[1].Reason != credentials.ReasonRateLimited {
		t.Errorf("audit = %+v, want one use then one rate-limited refusal", entries)
	}
}

func TestExpiredCredential(t *testing.T) {
	h := newHarness(t)
	c, _ := h.client(flowFor("expired.example.com"))
	resp, body := h.do(c, newRequest(t, "GET", "https://expired.example.com/", nil))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "expired") {
		t.Errorf("got %d %q, want 403 naming the expiry", resp.StatusCode, body)
	}
	if n := len(h.seen()); n != 0 {
		t.Errorf("upstream saw %d requests, want 0", n)
	}
}

func TestRefusals(t *testing.T) {
	tests := []struct {
		name    string
		flow    Flow
		request string
		status  int
		body    string
		class   error
	}{
		{
			name: "host differs from SNI", flow: flowFor("api.example.com"),
			request: "GET / HTTP/1.1\r\nHost: other.example.com\r\n\r\n",
			status:  403, body: "does not match the TLS server name", class: errdefs.ErrPermissionDenied,
		},
		{
			name: "absolute URI names another host", flow: flowFor("api.example.com"),
			request: "GET https://other.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
			status:  403, body: "does not match", class: errdefs.ErrPermissionDenied,
		},
		{
			name: "policy deny list", flow: Flow{Dst: netip.MustParseAddrPort("127.0.0.1:443"), SNI: "denied.example.com"},
			request: "GET / HTTP/1.1\r\nHost: denied.example.com\r\n\r\n",
			status:  403, body: "deny.domains", class: errdefs.ErrPermissionDenied,
		},
		{
			name: "websocket", flow: flowFor("api.example.com"),
			request: "GET /ws HTTP/1.1\r\nHost: api.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
			status:  501, body: "upgrades", class: errdefs.ErrInvalidArgument,
		},
		{
			name: "connect", flow: flowFor("api.example.com"),
			request: "CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n",
			status:  501, body: "CONNECT", class: errdefs.ErrInvalidArgument,
		},
		{
			name: "malformed", flow: flowFor("api.example.com"),
			request: "GET / HTTP/1.1\r\nHost api.example.com\r\n\r\n",
			status:  400, body: "malformed", class: errdefs.ErrInvalidArgument,
		},
		{
			name: "missing host", flow: flowFor("api.example.com"),
			request: "GET / HTTP/1.1\r\n\r\n",
			status:  400, body: "Host", class: errdefs.ErrInvalidArgument,
		},
		{
			name: "bad port", flow: flowFor("api.example.com"),
			request: "GET / HTTP/1.1\r\nHost: api.example.com:x\r\n\r\n",
			status:  400, body: "Host", class: errdefs.ErrInvalidArgument,
		},
		{
			name: "header too large", flow: flowFor("api.example.com"),
			request: "GET / HTTP/1.1\r\nHost: api.example.com\r\nX-Big: " + strings.Repeat("a", MaxRequestHeaderBytes) + "\r\n\r\n",
			status:  431, body: "larger than", class: errdefs.ErrInvalidArgument,
		},
		{
			name: "http/2 preface", flow: flowFor("api.example.com"),
			request: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
			status:  505, body: "HTTP/1.x", class: errdefs.ErrInvalidArgument,
		},
		{
			name: "expect", flow: flowFor("api.example.com"),
			request: "POST / HTTP/1.1\r\nHost: api.example.com\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx",
			status:  417, body: "Expect", class: errdefs.ErrInvalidArgument,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			resp, body := h.rawRoundTrip(tt.flow, tt.request)
			if resp.StatusCode != tt.status || !strings.Contains(body, tt.body) {
				t.Errorf("got %d %q, want %d containing %q", resp.StatusCode, body, tt.status, tt.body)
			}
			if !resp.Close {
				t.Error("refusal did not close the connection")
			}
			if n := len(h.seen()); n != 0 {
				t.Errorf("upstream saw %d requests, want 0", n)
			}
			h.ln.Close()
			h.serving.Wait() // Serve has returned: its error is recorded
			errs := h.serveErrors()
			if len(errs) != 1 || !errors.Is(errs[0], tt.class) {
				t.Errorf("Serve errors = %v, want one of class %v", errs, tt.class)
			}
		})
	}
}

func TestUpstreamUntrusted(t *testing.T) {
	h := newHarness(t)
	_, pool := newTestCA(t) // a pool that does not hold the upstream's issuer
	h.ic.UpstreamRoots = pool
	c, _ := h.client(flowFor("api.example.com"))
	resp, body := h.do(c, newRequest(t, "GET", "https://api.example.com/", nil))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "certificate") {
		t.Errorf("got %d %q, want 502 naming the certificate", resp.StatusCode, body)
	}
	if n := len(h.seen()); n != 0 {
		t.Errorf("upstream handled %d requests over an unverified connection", n)
	}
}

func TestUpstreamWrongName(t *testing.T) {
	h := newHarness(t)
	// The upstream's certificate covers *.example.com and 127.0.0.1, not this.
	h.ic.Credentials = credentialFunc(func(credentials.Request) (*credentials.Credential, error) {
		return nil, errdefs.ErrNotFound
	})
	c, _ := h.client(flowFor("api.example.org"))
	resp, body := h.do(c, newRequest(t, "GET", "https://api.example.org/", nil))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "certificate") {
		t.Errorf("got %d %q, want 502 naming the certificate", resp.StatusCode, body)
	}
}

// credentialFunc adapts a function to CredentialSource.
type credentialFunc func(credentials.Request) (*credentials.Credential, error)

func (f credentialFunc) Resolve(_ context.Context, r credentials.Request) (*credentials.Credential, error) {
	return f(r)
}

// TestHeadersInjection: a "headers" credential sets each of its headers,
// replacing what the guest sent; each value is redacted from the response
// on its own; and a header it sets is not the guest's own credential.
func TestHeadersInjection(t *testing.T) {
	h := newHarness(t)
	h.setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo-Org", r.Header.Get("X-Org"))
		_, _ = io.WriteString(w, "key="+r.Header.Get("X-Key")+"\n")
	})
	c, _ := h.client(flowFor("multi.example.com"))
	req := newRequest(t, "GET", "https://multi.example.com/", nil)
	req.Header.Set("X-Key", placeholder)
	req.Header["x-org"] = []string{"guest-org"}
	resp, body := h.do(c, req) // do fails on any secret in the answer
	if resp.StatusCode != 200 {
		t.Fatalf("got %d %q, want 200 from the upstream", resp.StatusCode, body)
	}
	s := h.onlySeen()
	if got := s.Header.Values("X-Key"); len(got) != 1 || got[0] != secretMultiKey {
		t.Errorf("upstream X-Key = %q, want only its secret", got)
	}
	if got := s.Header.Values("X-Org"); len(got) != 1 || got[0] != secretMultiOrg {
		t.Errorf("upstream X-Org = %q, want only its secret", got)
	}
	if v := s.Header["x-org"]; v != nil {
		t.Errorf("upstream got the guest's lower-case X-Org %q", v)
	}
	if body != "key="+strings.Repeat(string(body[4]), len(secretMultiKey))+"\n" || strings.Trim(resp.Header.Get("X-Echo-Org"), string(body[4])) != "" {
		t.Errorf("answer %q, X-Echo-Org %q: want both values overwritten", body, resp.Header.Get("X-Echo-Org"))
	}
	// A credential header of the guest's own is refused, whichever of the
	// credential's headers the request also carries.
	own := newRequest(t, "GET", "https://multi.example.com/", nil)
	own.Header.Set("X-Key", placeholder)
	own.Header.Set("Authorization", "Bearer attacker-own-key")
	if resp, body := h.do(c, own); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "its own credential") {
		t.Errorf("a request with its own Authorization: %d %q, want 403", resp.StatusCode, body)
	}
}

// TestHeadersInjectionRefusesABrokenCredential: a "headers" credential
// whose names and values do not pair up (a source other than the
// validated store) sets none of them.
func TestHeadersInjectionRefusesABrokenCredential(t *testing.T) {
	out := newRequest(t, "GET", "https://multi.example.com/", nil)
	for _, c := range []credentials.Credential{
		{ID: "c-odd", Secret: []byte("only-one-value"), Injection: credentials.Injection{Method: credentials.MethodHeaders, Name: "X-Key,X-Org"}},
		{ID: "c-host", Secret: []byte("value-one-1\nvalue-two-2"), Injection: credentials.Injection{Method: credentials.MethodHeaders, Name: "X-Key,Host"}},
	} {
		if err := inject(out, &c); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("%s: inject = %v, want ErrFailedPrecondition", c.ID, err)
		}
		if out.Header.Get("X-Key") != "" {
			t.Errorf("%s: X-Key set (%q) by a refused credential", c.ID, out.Header.Get("X-Key"))
		}
	}
}
