package intercept

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/egress"
)

// Secrets of the test credentials; none may reach the guest or a log.
const (
	secretHeader  = "sk-SECRET-header-7f3a"
	secretBasicPw = "SECRET-basic-pw-91"
	secretQuery   = "SECRET-query-c0ffee"
	secretLimited = "SECRET-limited-55"
	secretIP      = "SECRET-ip-2e2e"
	placeholder   = "PLACEHOLDER"
)

// secretMultiKey and secretMultiOrg are the two headers of c-multi, a
// "headers" credential.
const (
	secretMultiKey = "sk-MULTI-key-91c2"
	secretMultiOrg = "org-MULTI-value-5d0e"
)

var allSecrets = []string{secretHeader, secretBasicPw, secretQuery, secretLimited, secretIP, secretMultiKey, secretMultiOrg}

// testCredentials are the rules of sandbox sb1 of tenant t1.
func testCredentials(t testing.TB) []credentials.Credential {
	scope := credentials.Scope{Tenant: "t1"}
	hdr := func(id, host, secret string) credentials.Credential {
		return credentials.Credential{
			ID: id, Scope: scope, Name: id, Secret: []byte(secret),
			Injection:    credentials.Injection{Method: credentials.MethodHeader, Name: "X-Api-Key"},
			AllowedHosts: []string{host},
		}
	}
	header := hdr("c-header", "api.example.com", secretHeader)
	basic := hdr("c-basic", "basic.example.com", "alice:"+secretBasicPw)
	basic.Injection = credentials.Injection{Method: credentials.MethodBasic}
	query := hdr("c-query", "query.example.com", secretQuery)
	query.Injection = credentials.Injection{Method: credentials.MethodQuery, Name: "api_key"}
	limited := hdr("c-limited", "limited.example.com", secretLimited)
	limited.RateLimit = 1
	expired := hdr("c-expired", "expired.example.com", "SECRET-expired")
	expired.ExpiresAt = time.Now().Add(-time.Hour)
	denied := hdr("c-denied", "denied.example.com", secretHeader)
	ip := hdr("c-ip", "127.0.0.1", secretIP)
	multi := hdr("c-multi", "multi.example.com", secretMultiKey+"\n"+secretMultiOrg)
	multi.Injection = credentials.Injection{Method: credentials.MethodHeaders, Name: "X-Key,X-Org"}
	return []credentials.Credential{header, basic, query, limited, expired, denied, ip, multi}
}

// seen is one request as the upstream received it.
type seen struct {
	Host   string
	Header http.Header
	Query  string
	Len    int64
	Sum    [32]byte
}

// harness is an upstream TLS server, an Interceptor in front of it, and
// guest connections over loopback TCP, each served by Interceptor.Serve.
type harness struct {
	t        testing.TB
	ic       *Interceptor
	caPool   *x509.CertPool
	upstream *httptest.Server
	audit    *credentials.MemoryAuditLog
	logs     *syncBuffer
	ln       net.Listener

	mu       sync.Mutex // guards reqs, errs, guests and handler
	reqs     []seen
	errs     []error
	guests   []net.Conn
	handler  http.HandlerFunc // optional, after recording
	direct   http.HandlerFunc // optional, instead of recording
	upConns  atomic.Int32
	serveCtx context.Context
	serving  sync.WaitGroup
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	h := &harness{t: t, audit: &credentials.MemoryAuditLog{}, logs: &syncBuffer{}}
	h.upstream = httptest.NewUnstartedServer(http.HandlerFunc(h.serveUpstream))
	h.upstream.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			h.upConns.Add(1)
		}
	}
	h.upstream.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	h.upstream.StartTLS()
	t.Cleanup(h.upstream.Close)
	upRoots := x509.NewCertPool()
	upRoots.AddCert(h.upstream.Certificate())

	backend := &credentials.MemoryBackend{}
	for _, c := range testCredentials(t) {
		if err := backend.Put(context.Background(), c); err != nil {
			t.Fatalf("Put %s: %v", c.ID, err)
		}
	}
	policy, err := egress.NewPolicy(egress.Spec{AllowInternet: true, Deny: egress.RuleSet{Domains: []string{"denied.example.com"}}})
	if err != nil {
		t.Fatal(err)
	}
	ca, pool := newTestCA(t)
	h.caPool = pool
	upAddr := h.upstream.Listener.Addr().String()
	h.ic = &Interceptor{
		CA:          ca,
		Policy:      egress.NewHolder(policy),
		Credentials: credentials.NewManager(backend, h.audit),
		DialUpstream: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", upAddr)
		},
		UpstreamRoots: upRoots,
		Identity:      credentials.Request{Tenant: "t1", Project: "p1", Sandbox: "sb1", ExecutionID: "e1"},
		Log:           slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	h.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.serveCtx = ctx
	t.Cleanup(func() {
		cancel()
		h.ln.Close()
		h.mu.Lock()
		for _, c := range h.guests {
			c.Close()
		}
		h.mu.Unlock()
		h.serving.Wait()
		h.assertNoSecretLeaked()
		if t.Failed() {
			t.Logf("interceptor log:\n%s\nServe errors: %v", h.logs.String(), h.serveErrors())
		}
	})
	return h
}

func (h *harness) serveUpstream(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	direct := h.direct
	h.mu.Unlock()
	if direct != nil {
		direct(w, r)
		return
	}
	sum := sha256.New()
	n, _ := io.Copy(sum, r.Body)
	s := seen{Host: r.Host, Header: r.Header.Clone(), Query: r.URL.RawQuery, Len: n}
	sum.Sum(s.Sum[:0])
	h.mu.Lock()
	h.reqs = append(h.reqs, s)
	handler := h.handler
	h.mu.Unlock()
	if handler != nil {
		handler(w, r)
		return
	}
	io.WriteString(w, "upstream ok\n")
}

func (h *harness) setHandler(f http.HandlerFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.handler = f
}

func (h *harness) setDirect(f http.HandlerFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.direct = f
}

func (h *harness) seen() []seen {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]seen(nil), h.reqs...)
}

func (h *harness) serveErrors() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.errs...)
}

// dial opens a loopback connection whose far end is served by Serve for
// flow, and returns the guest's (still plaintext) end. It may run on any
// goroutine.
func (h *harness) dial(flow Flow) (net.Conn, error) {
	guest, err := net.Dial("tcp", h.ln.Addr().String())
	if err != nil {
		return nil, err
	}
	conn, err := h.ln.Accept()
	if err != nil {
		guest.Close()
		return nil, err
	}
	h.mu.Lock()
	h.guests = append(h.guests, guest)
	h.mu.Unlock()
	h.serving.Add(1)
	go func() {
		defer h.serving.Done()
		if err := h.ic.Serve(h.serveCtx, conn, flow); err != nil {
			h.mu.Lock()
			h.errs = append(h.errs, err)
			h.mu.Unlock()
		}
	}()
	return guest, nil
}

// flowFor is a connection allowed for domain sni, as the gateway makes it.
func flowFor(sni string) Flow {
	return Flow{Dst: netip.MustParseAddrPort("127.0.0.1:443"), ConnDomain: sni, SNI: sni}
}

// client returns an HTTP client whose every connection is intercepted for
// flow, and a counter of the connections it made.
func (h *harness) client(flow Flow) (*http.Client, *atomic.Int32) {
	dials := &atomic.Int32{}
	serverName := flow.SNI
	if serverName == "" {
		serverName = flow.Dst.Addr().String()
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			dials.Add(1)
			return h.dial(flow)
		},
		TLSClientConfig:    &tls.Config{RootCAs: h.caPool, ServerName: serverName, NextProtos: []string{"http/1.1"}},
		DisableCompression: true,
		MaxConnsPerHost:    1,
	}
	h.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: time.Minute}, dials
}

// raw opens a TLS connection to the interceptor for flow, for requests an
// http.Client would not send.
func (h *harness) raw(flow Flow) (*tls.Conn, *bufio.Reader) {
	h.t.Helper()
	guest, err := h.dial(flow)
	if err != nil {
		h.t.Fatal(err)
	}
	c := tls.Client(guest, &tls.Config{RootCAs: h.caPool, ServerName: flow.SNI, NextProtos: []string{"http/1.1"}})
	if err := c.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		h.t.Fatal(err)
	}
	if err := c.Handshake(); err != nil {
		h.t.Fatalf("handshake: %v", err)
	}
	return c, bufio.NewReader(c)
}

// rawRoundTrip writes request bytes and reads one response, body included.
func (h *harness) rawRoundTrip(flow Flow, request string) (*http.Response, string) {
	h.t.Helper()
	c, r := h.raw(flow)
	defer c.Close()
	if _, err := io.WriteString(c, request); err != nil {
		h.t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		h.t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("read body: %v", err)
	}
	h.checkNoSecret("response", string(body)+headerText(resp.Header))
	return resp, string(body)
}

// get sends one request with c and returns its status and body.
func (h *harness) do(c *http.Client, req *http.Request) (*http.Response, string) {
	h.t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("%s %s: read body: %v", req.Method, req.URL, err)
	}
	h.checkNoSecret("response", string(body)+headerText(resp.Header))
	return resp, string(body)
}

func headerText(hd http.Header) string {
	var b strings.Builder
	hd.Write(&b)
	return b.String()
}

func (h *harness) checkNoSecret(where, text string) {
	h.t.Helper()
	for _, s := range allSecrets {
		if strings.Contains(text, s) {
			h.t.Errorf("secret %q leaked into the %s: %q", s, where, text)
		}
	}
}

func (h *harness) assertNoSecretLeaked() {
	h.t.Helper()
	h.checkNoSecret("log", h.logs.String())
	for _, err := range h.serveErrors() {
		h.checkNoSecret("Serve error", err.Error())
	}
}

func newRequest(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
