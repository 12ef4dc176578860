package intercept

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
)

// randomBody is n deterministic pseudo-random bytes, produced as read.
func randomBody(n int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{1, 2, 3}), n)
}

func sumOf(r io.Reader) (int64, [32]byte) {
	h := sha256.New()
	n, _ := io.Copy(h, r)
	var s [32]byte
	h.Sum(s[:0])
	return n, s
}

func TestLargeBodies(t *testing.T) {
	const size = 10 << 20
	wantLen, wantSum := sumOf(randomBody(size))
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			h := newHarness(t)
			h.setHandler(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(w, randomBody(size)) // a large response too, of unknown length
			})
			c, _ := h.client(flowFor("api.example.com"))
			req := newRequest(t, "PUT", "https://api.example.com/upload", struct{ io.Reader }{randomBody(size)})
			if !chunked {
				req.ContentLength = size
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			gotLen, gotSum := sumOf(resp.Body)
			if resp.StatusCode != 200 || gotLen != wantLen || gotSum != wantSum {
				t.Errorf("response: status %d, %d bytes, intact %v; want 200, %d bytes", resp.StatusCode, gotLen, gotSum == wantSum, wantLen)
			}
			s := h.onlySeen()
			if s.Len != wantLen || s.Sum != wantSum {
				t.Errorf("upstream got %d bytes (intact %v), want %d", s.Len, s.Sum == wantSum, wantLen)
			}
			if s.Header.Get("X-Api-Key") != secretHeader {
				t.Error("credential missing on the streamed request")
			}
		})
	}
}

func TestKeepAlive(t *testing.T) {
	h := newHarness(t)
	c, dials := h.client(flowFor("api.example.com"))
	for i := range 5 {
		method, body := "GET", io.Reader(nil)
		if i%2 == 1 {
			method, body = "POST", strings.NewReader(strings.Repeat("b", 1000*i))
		}
		resp, got := h.do(c, newRequest(t, method, fmt.Sprintf("https://api.example.com/%d", i), body))
		if resp.StatusCode != 200 || got != "upstream ok\n" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, got)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("guest made %d connections, want 1", n)
	}
	if n := h.upConns.Load(); n != 1 {
		t.Errorf("interceptor made %d upstream connections, want 1", n)
	}
	seen := h.seen()
	if len(seen) != 5 {
		t.Fatalf("upstream saw %d requests, want 5", len(seen))
	}
	for i, s := range seen {
		if s.Header.Get("X-Api-Key") != secretHeader {
			t.Errorf("request %d lacks the credential", i)
		}
	}
	if n := len(h.audit.Entries()); n != 5 {
		t.Errorf("audit has %d entries, want one per request (5)", n)
	}
}

func TestUpstreamClosedIdleConnection(t *testing.T) {
	h := newHarness(t)
	c, dials := h.client(flowFor("api.example.com"))
	for i := range 3 {
		if resp, _ := h.do(c, newRequest(t, "GET", "https://api.example.com/", nil)); resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		h.upstream.CloseClientConnections()
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("guest made %d connections, want 1: an upstream close is not the guest's concern", n)
	}
	if n := h.upConns.Load(); n != 3 {
		t.Errorf("%d upstream connections, want 3", n)
	}
}

func TestUpstreamConnectionClose(t *testing.T) {
	h := newHarness(t)
	h.setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	})
	c, dials := h.client(flowFor("api.example.com"))
	for range 2 {
		if resp, body := h.do(c, newRequest(t, "GET", "https://api.example.com/", nil)); resp.StatusCode != 200 || body != "bye" || resp.Close {
			t.Fatalf("got %d %q close=%v, want 200 bye on a kept connection", resp.StatusCode, body, resp.Close)
		}
	}
	if dials.Load() != 1 || h.upConns.Load() != 2 {
		t.Errorf("guest connections %d, upstream connections %d; want 1 and 2", dials.Load(), h.upConns.Load())
	}
}

// A streamed response reaches the guest as it is produced: the upstream
// sends its second event only after the guest has read the first.
func TestStreamingResponseFlushes(t *testing.T) {
	h := newHarness(t)
	gotFirst := make(chan struct{})
	h.setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-gotFirst:
		case <-time.After(time.Minute): // deadlock guard only
		}
		io.WriteString(w, "data: two\n\n")
	})
	c, _ := h.client(flowFor("api.example.com"))
	resp, err := c.Get("https://api.example.com/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	line, err := r.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	close(gotFirst)
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != "\ndata: two\n\n" {
		t.Fatalf("rest: %q, %v", rest, err)
	}
}

// An upstream that answers before reading the body gets its answer relayed,
// and the connection, whose framing is lost, is closed.
func TestEarlyResponse(t *testing.T) {
	h := newHarness(t)
	h.setDirect(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusRequestEntityTooLarge) // without reading the body
		io.WriteString(w, "too big")
	})
	c, r := h.raw(flowFor("api.example.com"))
	// Announce 10 MiB, send 1 KiB, wait for the answer.
	head := "POST /upload HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 10485760\r\n\r\n"
	if _, err := io.WriteString(c, head+strings.Repeat("x", 1024)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || string(body) != "too big" || !resp.Close {
		t.Errorf("got %d %q close=%v, want the upstream's 413 and a close", resp.StatusCode, body, resp.Close)
	}
}

func TestExpectContinue(t *testing.T) {
	h := newHarness(t)
	c, r := h.raw(flowFor("api.example.com"))
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: api.example.com\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("got %v, %v; want 100 Continue before the body", resp, err)
	}
	if _, err := io.WriteString(c, "hello"); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("final response %v, %v", resp, err)
	}
	s := h.onlySeen()
	if s.Len != 5 || s.Header.Get("Expect") != "" {
		t.Errorf("upstream got %d bytes, Expect %q; want 5 and none", s.Len, s.Header.Get("Expect"))
	}
}

func TestHTTP10Guest(t *testing.T) {
	h := newHarness(t)
	h.setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("part1"))
		w.(http.Flusher).Flush() // chunked upstream response
		w.Write([]byte("part2"))
	})
	resp, body := h.rawRoundTrip(flowFor("api.example.com"), "GET / HTTP/1.0\r\nHost: api.example.com\r\n\r\n")
	if resp.StatusCode != 200 || body != "part1part2" || len(resp.TransferEncoding) != 0 || !resp.Close {
		t.Errorf("got %d %q TE %v close %v; want the body delimited by close", resp.StatusCode, body, resp.TransferEncoding, resp.Close)
	}
}

func TestIPFlowWithoutSNI(t *testing.T) {
	h := newHarness(t)
	flow := Flow{Dst: netip.MustParseAddrPort("127.0.0.1:443")}
	c, _ := h.client(flow)
	if resp, _ := h.do(c, newRequest(t, "GET", "https://127.0.0.1/", nil)); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := h.onlySeen().Header.Get("X-Api-Key"); got != secretIP {
		t.Errorf("X-Api-Key = %q, want the IP credential", got)
	}
}

func TestGuestOffersOnlyH2(t *testing.T) {
	h := newHarness(t)
	guest, err := h.dial(flowFor("api.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(guest, &tls.Config{RootCAs: h.caPool, ServerName: "api.example.com", NextProtos: []string{"h2"}})
	c.SetDeadline(time.Now().Add(time.Minute))
	if err := c.Handshake(); err == nil {
		t.Errorf("handshake offering only h2 succeeded with protocol %q", c.ConnectionState().NegotiatedProtocol)
	}
}

func TestCredentialSourceFailure(t *testing.T) {
	h := newHarness(t)
	h.ic.Credentials = credentialFunc(func(credentials.Request) (*credentials.Credential, error) {
		return nil, fmt.Errorf("vault sealed: %w", errdefs.ErrUnavailable)
	})
	c, _ := h.client(flowFor("api.example.com"))
	resp, _ := h.do(c, newRequest(t, "GET", "https://api.example.com/", nil))
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d, want 502", resp.StatusCode)
	}
	if n := len(h.seen()); n != 0 {
		t.Errorf("upstream saw %d requests, want 0", n)
	}
}

func TestServeEndsWithContext(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	h.serveCtx = ctx
	c, r := h.raw(flowFor("api.example.com"))
	cancel()
	c.SetReadDeadline(time.Now().Add(time.Minute)) // deadlock guard only
	if _, err := r.ReadByte(); err == nil {
		t.Error("connection still open after the context was cancelled")
	}
	h.serving.Wait() // Serve returned
	if errs := h.serveErrors(); len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Errorf("Serve errors %v, want context.Canceled", errs)
	}
}

func TestUpstreamStale(t *testing.T) {
	newUp := func(c net.Conn) *upstream {
		conn := newTimeoutConn(c, time.Minute)
		limit := &headerLimit{r: conn}
		return &upstream{conn: conn, limit: limit, r: bufio.NewReader(limit), w: bufio.NewWriter(conn), idle: time.Minute}
	}
	t.Run("open and silent", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		if newUp(a).stale() {
			t.Error("a live, silent connection is reported stale")
		}
	})
	t.Run("closed by the server", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		b.Close()
		if !newUp(a).stale() {
			t.Error("a closed connection is not reported stale")
		}
	})
	t.Run("unsolicited bytes", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		go b.Write([]byte("HTTP/1.1 408 Request Timeout\r\n\r\n"))
		u := newUp(a)
		if _, err := u.r.Peek(1); err != nil { // wait until the bytes are there
			t.Fatal(err)
		}
		if !u.stale() {
			t.Error("a connection with unsolicited bytes is not reported stale")
		}
	})
}
