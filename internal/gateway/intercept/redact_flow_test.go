package intercept

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
)

// secretTexts are every secret of the harness and the basic user:password,
// whose forms must never reach the guest.
var secretTexts = append([]string{"alice:" + secretBasicPw}, allSecrets...)

// checkNoForms fails the test if text holds any form of any secret, in
// any ASCII case (net/http changes the case of header names).
func checkNoForms(t *testing.T, where, text string) {
	t.Helper()
	lower := strings.ToLower(text)
	for _, s := range secretTexts {
		for _, f := range secretForms([]byte(s)) {
			if strings.Contains(lower, strings.ToLower(string(f))) {
				t.Errorf("%s holds %q (a form of secret %q):\n%s", where, f, s, text)
				return
			}
		}
	}
}

// echoValues are what the echoing upstream reflects: every request header
// value, the raw query, and the password of a basic Authorization alone.
func echoValues(r *http.Request) []string {
	var vs []string
	for _, v := range r.Header {
		vs = append(vs, v...)
	}
	if _, pw, ok := r.BasicAuth(); ok {
		vs = append(vs, "password="+pw)
	}
	return append(vs, r.URL.RawQuery)
}

// echoUpstream reflects the request back in the way ?mode= says.
func echoUpstream(w http.ResponseWriter, r *http.Request) {
	values := echoValues(r)
	body, _ := io.ReadAll(r.Body)
	for k, vs := range r.Header {
		for _, v := range vs {
			w.Header().Add("X-Echo-"+k, v)
		}
	}
	switch r.URL.Query().Get("mode") {
	case "json":
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"headers": r.Header, "query": r.URL.RawQuery, "body": string(body)})
	case "base64":
		for _, v := range values {
			for _, p := range []string{"", "a", "ab"} {
				fmt.Fprintln(w, base64.StdEncoding.EncodeToString([]byte(p+v+"z")), base64.RawURLEncoding.EncodeToString([]byte(p+v)))
			}
		}
	case "urlenc":
		for _, v := range values {
			e := url.QueryEscape(v)
			fmt.Fprintln(w, e, string(lowerHex(e, '%', 2)), url.PathEscape(v))
		}
	case "chunks":
		// One byte per chunk: each secret is split across many.
		var b bytes.Buffer
		json.NewEncoder(&b).Encode(map[string]any{"headers": r.Header, "query": r.URL.RawQuery})
		for _, c := range b.Bytes() {
			w.Write([]byte{c})
			w.(http.Flusher).Flush()
		}
	case "redirect":
		w.Header().Set("Location", "https://other.example.com/callback?token="+url.QueryEscape(r.Header.Get("X-Api-Key"))+"&q="+r.URL.RawQuery)
		w.WriteHeader(http.StatusFound)
	case "gzip":
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		json.NewEncoder(zw).Encode(map[string]any{"headers": r.Header, "query": r.URL.RawQuery})
		zw.Close()
	case "trailer":
		w.Header().Set("Trailer", "X-Echo-Trailer")
		io.WriteString(w, "body first\n")
		w.Header().Set("X-Echo-Trailer", strings.Join(values, ";"))
	case "status":
		// A reason phrase and a header name made of the secret.
		c, rw, _ := w.(http.Hijacker).Hijack()
		defer c.Close()
		v := strings.Join(values, " ")
		fmt.Fprintf(rw, "HTTP/1.1 200 %s\r\nConnection: close\r\nX-%s: name\r\nContent-Length: %d\r\n\r\n%s", v, tokenOnly(v), len(v), v)
		rw.Flush()
	default:
		fmt.Fprintf(w, "%q %q\n", values, body)
	}
}

// guestRequest is one request as the guest sends it to a host with a
// credential rule.
func guestRequest(t *testing.T, host, mode string) *http.Request {
	req := newRequest(t, "POST", "https://"+host+"/echo?mode="+mode, strings.NewReader("guest body"))
	switch host {
	case "api.example.com":
		req.Header.Set("X-Api-Key", placeholder)
	case "basic.example.com":
		req.SetBasicAuth("guest", placeholder)
	case "query.example.com":
		req.URL.RawQuery += "&api_key=" + placeholder
	}
	return req
}

func TestEchoedSecretIsRedacted(t *testing.T) {
	creds := map[string]string{"api.example.com": "c-header", "basic.example.com": "c-basic", "query.example.com": "c-query"}
	for _, mode := range []string{"plain", "json", "base64", "urlenc", "chunks", "redirect", "gzip", "trailer", "status"} {
		for host, credID := range creds {
			t.Run(mode+"/"+host, func(t *testing.T) {
				h := newHarness(t)
				h.ic.Counters = &Counters{}
				h.setHandler(echoUpstream)
				c, _ := h.client(flowFor(host))
				c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
				for i := range 2 { // the second on the same connection
					resp, err := c.Do(guestRequest(t, host, mode))
					if err != nil {
						t.Fatalf("request %d: %v", i, err)
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil {
						t.Fatalf("request %d: read body: %v", i, err)
					}
					if resp.Header.Get("Content-Encoding") == "gzip" {
						// Relayed compressed: look inside, as the guest would.
						if zr, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
							body, _ = io.ReadAll(zr)
						}
					}
					if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusFound {
						t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, body)
					}
					all := resp.Status + "\n" + headerText(resp.Header) + "\n" + string(body) + "\n" + headerText(resp.Trailer)
					checkNoForms(t, "the response to the guest", all)
					if !strings.Contains(all, strings.Repeat(string(h.redactorMarker()), 8)) {
						t.Errorf("no redaction marker in the response:\n%s", all)
					}
				}
				if got := len(h.seen()); got != 2 {
					t.Fatalf("upstream saw %d requests, want 2", got)
				}
				redactions := 0
				for _, e := range h.audit.Entries() {
					if e.Kind != credentials.KindRedaction {
						continue
					}
					redactions++
					if e.CredentialID != credID || e.Host != host || e.Sandbox != "sb1" || e.ExecutionID != "e1" || e.Count < 1 ||
						e.Where != "header" && e.Where != "body" || e.Reason != credentials.ReasonRedacted {
						t.Errorf("redaction entry %+v, want %s on %s by sb1/e1", e, credID, host)
					}
				}
				if redactions < 2 {
					t.Errorf("%d redaction entries in the audit log, want one per response at least: %+v", redactions, h.audit.Entries())
				}
				if n := h.ic.Counters.Redactions.Load(); n < 2 {
					t.Errorf("Counters.Redactions = %d, want at least 2", n)
				}
				checkNoForms(t, "the interceptor log", h.logs.String())
			})
		}
	}
}

// redactorMarker is the marker the redactor of the harness's secrets uses.
func (h *harness) redactorMarker() byte {
	var in []injected
	for _, s := range secretTexts {
		in = append(in, injected{credID: "x", secret: []byte(s)})
	}
	r, err := newRedactor(in)
	if err != nil {
		h.t.Fatal(err)
	}
	return r.marker
}

func TestInjectedRequestAsksForWholeIdentityResponse(t *testing.T) {
	h := newHarness(t)
	c, _ := h.client(flowFor("api.example.com"))
	req := newRequest(t, "GET", "https://api.example.com/", nil)
	req.Header.Set("Accept-Encoding", "gzip, br, zstd")
	req.Header.Set("Range", "bytes=0-3")
	req.Header.Set("If-Range", `"etag"`)
	h.do(c, req)
	s := h.onlySeen()
	if got := s.Header.Values("Accept-Encoding"); len(got) != 1 || got[0] != "identity" {
		t.Errorf("upstream Accept-Encoding = %q, want identity", got)
	}
	if s.Header.Get("Range") != "" || s.Header.Get("If-Range") != "" {
		t.Errorf("upstream got Range %q, If-Range %q; want neither", s.Header.Get("Range"), s.Header.Get("If-Range"))
	}
}

func TestUnscannableEncodingIsRefused(t *testing.T) {
	for _, coding := range []string{"br", "zstd", "gzip, gzip", "compress"} {
		t.Run(coding, func(t *testing.T) {
			h := newHarness(t)
			h.ic.Counters = &Counters{}
			h.setHandler(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", coding)
				io.WriteString(w, "opaque bytes that might hide "+r.Header.Get("X-Api-Key"))
			})
			c, _ := h.client(flowFor("api.example.com"))
			resp, body := h.do(c, guestRequest(t, "api.example.com", "x"))
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "cannot scan") {
				t.Errorf("got %d %q, want 502 saying the response cannot be scanned", resp.StatusCode, body)
			}
			if n := h.ic.Counters.Unscannable.Load(); n != 1 {
				t.Errorf("Counters.Unscannable = %d, want 1", n)
			}
		})
	}
}

func TestRedirectToAnotherHostCarriesNoSecret(t *testing.T) {
	h := newHarness(t)
	h.setHandler(func(w http.ResponseWriter, r *http.Request) {
		if r.Host == "api.example.com" {
			echoUpstream(w, r)
			return
		}
		io.WriteString(w, "other host\n")
	})
	// The guest follows the redirect itself; a new connection to the
	// other host is intercepted for that host, which has no rule.
	flows := map[string]Flow{"api.example.com": flowFor("api.example.com"), "other.example.com": flowFor("other.example.com")}
	c := h.multiHostClient(flows)
	resp, body := h.do(c, guestRequest(t, "api.example.com", "redirect"))
	if resp.StatusCode != 200 || body != "other host\n" {
		t.Fatalf("after the redirect: %d %q, want the other host's answer", resp.StatusCode, body)
	}
	got := h.seen()
	if len(got) != 2 || got[1].Host != "other.example.com" {
		t.Fatalf("upstream saw %+v, want the request and then the redirected one", got)
	}
	checkNoForms(t, "the redirected request's header", headerText(got[1].Header)+" "+got[1].Query)
	if got[0].Header.Get("X-Api-Key") != secretHeader {
		t.Errorf("the first request did not carry the credential")
	}

	// The same, sent on the connection the redirect came on: refused,
	// never forwarded.
	resp, _ = h.rawRoundTrip(flowFor("api.example.com"),
		"GET /callback HTTP/1.1\r\nHost: other.example.com\r\nX-Api-Key: "+placeholder+"\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a request for the redirect's host on the first host's connection got %d, want 403", resp.StatusCode)
	}
	if n := len(h.seen()); n != 2 {
		t.Errorf("upstream saw %d requests, want still 2", n)
	}
}

// multiHostClient is a client whose connections are intercepted for the
// flow of the host dialled.
func (h *harness) multiHostClient(flows map[string]Flow) *http.Client {
	tr := &http.Transport{
		DialTLSContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, _, _ := strings.Cut(addr, ":")
			raw, err := h.dial(flows[host])
			if err != nil {
				return nil, err
			}
			c := tls.Client(raw, &tls.Config{RootCAs: h.caPool, ServerName: host, NextProtos: []string{"http/1.1"}})
			if err := c.HandshakeContext(ctx); err != nil {
				raw.Close()
				return nil, err
			}
			return c, nil
		},
		DisableCompression: true,
	}
	h.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func TestOwnCredentialIsRefused(t *testing.T) {
	for _, tt := range []struct {
		host, header string
	}{
		{"api.example.com", "Authorization"},
		{"api.example.com", "x-goog-api-key"},
		{"basic.example.com", "X-Api-Key"},
		{"query.example.com", "Authorization"},
		{"query.example.com", "Private-Token"},
	} {
		t.Run(tt.host+"/"+tt.header, func(t *testing.T) {
			h := newHarness(t)
			c, _ := h.client(flowFor(tt.host))
			req := guestRequest(t, tt.host, "x")
			req.Header[tt.header] = []string{"Bearer attacker-own-key"}
			resp, body := h.do(c, req)
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "its own credential") {
				t.Errorf("got %d %q, want 403 naming the request's own credential", resp.StatusCode, body)
			}
			if n := len(h.seen()); n != 0 {
				t.Errorf("upstream saw %d requests, want none", n)
			}
			if errs := h.waitServeErrors(1); len(errs) == 0 || !errdefs.IsPermissionDenied(errs[0]) {
				t.Errorf("Serve errors %v, want ErrPermissionDenied", errs)
			}
		})
	}
}

func TestTraceIsRefused(t *testing.T) {
	h := newHarness(t)
	resp, _ := h.rawRoundTrip(flowFor("api.example.com"), "TRACE / HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
	if resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("TRACE got %d, want 501", resp.StatusCode)
	}
	if n := len(h.seen()); n != 0 {
		t.Errorf("upstream saw %d requests, want none", n)
	}
}

// redactionFailingAudit records resolutions and fails every redaction
// entry.
type redactionFailingAudit struct{ credentials.MemoryAuditLog }

func (a *redactionFailingAudit) Record(ctx context.Context, e credentials.AuditEntry) error {
	if e.Kind == credentials.KindRedaction {
		return errors.New("disk full")
	}
	return a.MemoryAuditLog.Record(ctx, e)
}

func TestRedactionFailsClosedWithoutAudit(t *testing.T) {
	for _, mode := range []string{"status", "plain"} {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t)
			backend := &credentials.MemoryBackend{}
			for _, c := range testCredentials(t) {
				backend.Put(context.Background(), c)
			}
			h.ic.Credentials = credentials.NewManager(backend, &redactionFailingAudit{})
			h.setHandler(func(w http.ResponseWriter, r *http.Request) {
				if mode == "plain" {
					// The header is clean; the secret is deep in the
					// body, after bytes the guest already has.
					io.WriteString(w, strings.Repeat("x", 100<<10))
				}
				echoUpstream(w, r)
			})
			c, r := h.raw(flowFor("api.example.com"))
			defer c.Close()
			fmt.Fprintf(c, "GET /echo?mode=%s HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: %s\r\n\r\n", mode, placeholder)
			got, _ := io.ReadAll(r) // until the interceptor closes
			checkNoForms(t, "what the guest read", string(got))
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
			switch mode {
			case "status":
				if err != nil || resp.StatusCode != http.StatusBadGateway {
					t.Fatalf("got %q, want a 502", got)
				}
			case "plain":
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("got %.200q, want the start of a 200", got)
				}
				if _, err := io.ReadAll(resp.Body); err == nil {
					t.Errorf("the response whose redaction could not be audited was relayed whole")
				}
			}
			if errs := h.waitServeErrors(1); len(errs) == 0 || !errdefs.IsUnavailable(errs[0]) {
				t.Errorf("Serve errors %v, want ErrUnavailable", errs)
			}
		})
	}
}

// waitServeErrors waits until Serve has returned n errors (the guest may
// read a refusal before Serve records it), and returns them.
func (h *harness) waitServeErrors(n int) []error {
	for range 200 {
		if errs := h.serveErrors(); len(errs) >= n {
			return errs
		}
		time.Sleep(10 * time.Millisecond)
	}
	return h.serveErrors()
}

// tokenOnly keeps the letters, digits and dashes of s: a header name.
func tokenOnly(s string) string {
	return strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' {
			return r
		}
		return -1
	}, s)
}

// shortSource hands out a credential too short to redact, as a source
// that does not validate (the node's, which trusts the control plane)
// might.
type shortSource struct{}

func (shortSource) Resolve(context.Context, credentials.Request) (*credentials.Credential, error) {
	return &credentials.Credential{ID: "c-short", Secret: []byte("abc"),
		Injection: credentials.Injection{Method: credentials.MethodHeader, Name: "X-Api-Key"}}, nil
}

func TestUnredactableSecretIsNotSent(t *testing.T) {
	h := newHarness(t)
	h.ic.Credentials = shortSource{}
	c, _ := h.client(flowFor("api.example.com"))
	resp, body := h.do(c, guestRequest(t, "api.example.com", "x"))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "cannot be redacted") {
		t.Errorf("got %d %q, want 502 saying the credential cannot be redacted", resp.StatusCode, body)
	}
	if n := len(h.seen()); n != 0 {
		t.Errorf("upstream saw %d requests, want none", n)
	}
}
