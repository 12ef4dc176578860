package intercept

import (
	"bytes"
	"context"
	"log/slog"
	"net"

	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// memConn is a net.Conn over fixed input: reads return data then io.EOF,
// writes are scanned for secrets and discarded. Deadlines are no-ops; a
// read never blocks.
type memConn struct {
	r      *bytes.Reader
	out    bytes.Buffer // at most outCap bytes of what was written
	leaked bool
}

const outCap = 1 << 20

func (c *memConn) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c *memConn) Write(p []byte) (int, error) {
	if c.out.Len() < outCap {
		c.out.Write(p)
	}
	return len(p), nil
}
func (c *memConn) Close() error                     { return nil }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// leakWriter flags any write that contains a secret, keeping nothing.
type leakWriter struct{ leaked atomic.Bool }

func (w *leakWriter) Write(p []byte) (int, error) {
	for _, s := range allSecrets {
		if bytes.Contains(p, []byte(s)) {
			w.leaked.Store(true)
		}
	}
	return len(p), nil
}

// FuzzServeHTTP feeds arbitrary bytes to the request loop as the decrypted
// stream from the guest, in front of a real upstream. It must neither
// panic nor hang, and the secret must reach neither the guest nor the log.
func FuzzServeHTTP(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: " + placeholder + "\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: api.example.com\r\n\r\nGET /b HTTP/1.1\r\nHost: API.example.com:443\r\nConnection: close\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 5\r\n\r\nhello",
		"POST /p HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 50\r\n\r\nshort",
		"POST /p HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: api.example.com\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
		"GET / HTTP/1.1\r\nHost: other.example.com\r\n\r\n",
		"GET https://api.example.com/x?api_key=1 HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: api.example.com\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
		"CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
		"GET / HTTP/1.0\r\nHost: api.example.com\r\n\r\n",
		"HEAD / HTTP/1.1\r\nHost: api.example.com\r\nConnection: X-Api-Key, keep-alive\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: [::1]:443\r\n\r\n",
		"GET * HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
		"\r\n\r\n",
		"",
		"GET /echo?mode=json HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
		"GET /echo?mode=status HTTP/1.1\r\nHost: api.example.com\r\nX-Api-Key: x\r\n\r\n",
		"GET /echo?mode=gzip HTTP/1.1\r\nHost: api.example.com\r\nAccept-Encoding: gzip\r\n\r\n",
		"GET /echo?mode=chunks HTTP/1.1\r\nHost: api.example.com\r\n\r\nGET /echo?mode=trailer HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
		"POST /echo?mode=base64 HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 2\r\n\r\nhi",
		"HEAD /echo?mode=redirect HTTP/1.0\r\nHost: api.example.com\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	h := newHarness(f)
	// An upstream that reflects the request, as ?mode= asks (see
	// echoUpstream): the secret must not come back in any form.
	h.setDirect(echoUpstream)
	logs := &leakWriter{}
	h.ic.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// Deadlock guards only: memConn never blocks, the upstream answers.
	h.ic.Timeouts = Timeouts{Handshake: 10 * time.Second, Idle: 10 * time.Second, RequestHeader: 10 * time.Second, Inactivity: 10 * time.Second}
	flow := flowFor("api.example.com")
	f.Fuzz(func(t *testing.T, data []byte) {
		conn := &memConn{r: bytes.NewReader(data)}
		done := make(chan error, 1)
		go func() { done <- h.ic.serveHTTP(context.Background(), conn, flow, "api.example.com") }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("serveHTTP hung on %q", data)
		}
		out := strings.ToLower(conn.out.String())
		for _, s := range secretTexts {
			for _, f := range secretForms([]byte(s)) {
				if strings.Contains(out, strings.ToLower(string(f))) {
					t.Fatalf("secret %q reached the guest as %q for input %q", s, f, data)
				}
			}
		}
		if logs.leaked.Load() {
			t.Fatalf("secret reached the log for input %q", data)
		}
	})
}

// FuzzSetQueryParam checks that the injected parameter is the only one of
// its name, with the exact value, whatever query the guest sent.
func FuzzSetQueryParam(f *testing.F) {
	f.Add("a=1&api_key=x&b=2", "api_key", "s3cret/+ &=")
	f.Add("api%5Fkey=1&&api_key&=", "api_key", "v")
	f.Add("%zz=1;x=2", "%zz", "")
	f.Fuzz(func(t *testing.T, raw, name, value string) {
		if name == "" || !isTokenForTest(name) {
			return
		}
		got := setQueryParam(raw, name, value)
		vals, _ := url.ParseQuery(got)
		if v := vals[name]; len(v) != 1 || v[0] != value {
			t.Fatalf("setQueryParam(%q, %q, %q) = %q: %s = %q, want [%q]", raw, name, value, got, name, v, value)
		}
		if !strings.HasSuffix(got, url.QueryEscape(name)+"="+url.QueryEscape(value)) {
			t.Fatalf("setQueryParam(%q) = %q: injected parameter is not last", raw, got)
		}
	})
}

func isTokenForTest(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}
