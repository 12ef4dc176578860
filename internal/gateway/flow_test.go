package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// hostLog is an upstream HTTP server that reads every body and records the
// Host and body length of every request that reached it.
type hostLog struct {
	mu   sync.Mutex
	seen []string // "host len"
}

func (l *hostLog) requests() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen...)
}

// startHostLog starts the upstream and maps the sandbox address dst to it.
func startHostLog(t *testing.T, h *harness, dst string) *hostLog {
	l := &hostLog{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		l.mu.Lock()
		l.seen = append(l.seen, fmt.Sprintf("%s %d", r.Host, n))
		l.mu.Unlock()
		fmt.Fprintf(w, "host %s len %d", r.Host, n)
	}))
	t.Cleanup(srv.Close)
	h.dialer.mu.Lock()
	h.dialer.to[dst] = srv.Listener.Addr().String()
	h.dialer.mu.Unlock()
	return l
}

// dialFlow opens a guest connection to dst.
func dialFlow(t *testing.T, h *harness, dst string) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := h.g.dial(ctx, netip.MustParseAddrPort(dst))
	if err != nil {
		t.Fatalf("dial %s: %v", dst, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

// readResponses reads responses until the connection ends and returns
// their bodies.
func readResponses(br *bufio.Reader) []string {
	var bodies []string
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return bodies
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		bodies = append(bodies, string(b))
	}
}

// TestHTTPFlowEveryRequestDecided: on a spliced plaintext flow allowed for
// api.allowed.test, every request is decided, not only the first; the
// refused one never reaches the upstream and closes the flow.
func TestHTTPFlowEveryRequestDecided(t *testing.T) {
	h := startHarness(t, `{"allow_internet": false, "allow": {"domains": ["api.allowed.test"]}}`)
	up := startHostLog(t, h, "20.0.0.10:80")
	h.g.resolve(t, allowedHost)
	ok := get(allowedHost)
	wsUpgrade := "GET /ws HTTP/1.1\r\nHost: " + allowedHost + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	chunked := "POST /c HTTP/1.1\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	cases := []struct {
		name   string
		send   string
		reason string
		want   []string // requests reaching the upstream
	}{
		{"pipelined, the third with another Host", ok + ok + get("other.test"), ReasonHost, []string{allowedHost + " 0", allowedHost + " 0"}},
		{"absolute form naming another host", ok + "GET http://other.test/ HTTP/1.1\r\nHost: " + allowedHost + "\r\n\r\n", ReasonHost, []string{allowedHost + " 0"}},
		{"a chunked body, then a smuggled request", chunked + get("other.test"), ReasonHost, []string{allowedHost + " 5"}},
		{"CL and TE together", "POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + get("other.test"), ReasonHTTPSyntax, nil},
		{"h2c upgrade", "GET / HTTP/1.1\r\nHost: " + allowedHost + "\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n", ReasonHTTPUpgrade, nil},
		{"h2 prior-knowledge preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", ReasonHTTPUpgrade, nil},
		{"h2 preface after a request", ok + "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", ReasonHTTPUpgrade, []string{allowedHost + " 0"}},
		{"CONNECT", "CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n", ReasonHTTPConnect, nil},
		{"WebSocket upgrade on a second request", ok + wsUpgrade, ReasonHTTPUpgrade, []string{allowedHost + " 0"}},
		{"a request line longer than the sniff", "GET /" + strings.Repeat("a", maxSniff) + " HTTP/1.1\r\nHost: other.test\r\n\r\n", ReasonSniffFailure, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.counters.Snapshot()[c.reason]
			n := len(up.requests())
			conn := dialFlow(t, h, "20.0.0.10:80")
			io.WriteString(conn, c.send)
			readResponses(bufio.NewReader(conn))
			if got := up.requests()[n:]; fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("the upstream got %q, want %q", got, c.want)
			}
			if got := h.counters.Snapshot()[c.reason]; got != before+1 {
				t.Errorf("%s count %d, want %d", c.reason, got, before+1)
			}
		})
	}

	t.Run("a keep-alive request with another Host", func(t *testing.T) {
		n := len(up.requests())
		conn := dialFlow(t, h, "20.0.0.10:80")
		br := bufio.NewReader(conn)
		io.WriteString(conn, ok)
		if resp, err := http.ReadResponse(br, nil); err != nil {
			t.Fatalf("first request: %v", err)
		} else {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		io.WriteString(conn, get("other.test"))
		if resp, err := http.ReadResponse(br, nil); err == nil {
			t.Errorf("the second request, Host other.test, was answered: %s", resp.Status)
		}
		if got := up.requests()[n:]; len(got) != 1 || got[0] != allowedHost+" 0" {
			t.Errorf("the upstream got %q, want only the first request", got)
		}
	})
}

// TestHTTPFlowKeepAliveWorks: many requests to the allowed host on one
// flow, with large Content-Length and chunked bodies and Expect:
// 100-continue, all reach the upstream and are answered.
func TestHTTPFlowKeepAliveWorks(t *testing.T) {
	h := startHarness(t, `{"allow_internet": false, "allow": {"domains": ["api.allowed.test"]}}`)
	up := startHostLog(t, h, "20.0.0.10:80")
	h.g.resolve(t, allowedHost)
	conn := dialFlow(t, h, "20.0.0.10:80")
	br := bufio.NewReader(conn)
	roundTrip := func(req string, body io.Reader) string {
		t.Helper()
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		if body != nil {
			if _, err := io.Copy(conn, body); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	const big = 3 << 20
	var want []string
	for i := 0; i < 20; i++ {
		if got := roundTrip(get(allowedHost), nil); got != "host "+allowedHost+" len 0" {
			t.Fatalf("GET %d: %q", i, got)
		}
		want = append(want, allowedHost+" 0")
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), big/16)
	if got := roundTrip(fmt.Sprintf("POST /cl HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", allowedHost, big), bytes.NewReader(body)); got != fmt.Sprintf("host %s len %d", allowedHost, big) {
		t.Fatalf("Content-Length POST: %q", got)
	}
	want = append(want, fmt.Sprintf("%s %d", allowedHost, big))
	var chunks bytes.Buffer
	for off := 0; off < big; off += 100000 {
		part := body[off:min(off+100000, big)]
		fmt.Fprintf(&chunks, "%x\r\n%s\r\n", len(part), part)
	}
	chunks.WriteString("0\r\n\r\n")
	if got := roundTrip("POST /chunked HTTP/1.1\r\nHost: "+allowedHost+"\r\nTransfer-Encoding: chunked\r\n\r\n", &chunks); got != fmt.Sprintf("host %s len %d", allowedHost, big) {
		t.Fatalf("chunked POST: %q", got)
	}
	want = append(want, fmt.Sprintf("%s %d", allowedHost, big))

	// Expect: 100-continue: the head, the upstream's 100, then the body.
	io.WriteString(conn, "PUT /e HTTP/1.1\r\nHost: "+allowedHost+"\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("interim response %q, %v", line, err)
	}
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if got := roundTrip("hello", nil); got != "host "+allowedHost+" len 5" {
		t.Fatalf("100-continue PUT: %q", got)
	}
	want = append(want, allowedHost+" 5")
	if got := roundTrip(get(allowedHost+":80"), nil); got != "host "+allowedHost+":80 len 0" {
		t.Fatalf("GET after the bodies: %q", got)
	}
	want = append(want, allowedHost+":80 0")
	if got := up.requests(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the upstream got %q, want %q", got, want)
	}
	if snap := h.counters.Snapshot(); snap[ReasonAllowed] != 1 || len(snap) != 1 {
		t.Errorf("counters %v, want one allowed flow and nothing refused", snap)
	}
}

// rawLog is an upstream that records every byte each connection sent it.
type rawLog struct{ conns chan []byte }

func startRawLog(t *testing.T, h *harness, dst string) *rawLog {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	l := &rawLog{conns: make(chan []byte, 8)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				b, _ := io.ReadAll(c)
				l.conns <- b
			}()
		}
	}()
	h.dialer.mu.Lock()
	h.dialer.to[dst] = ln.Addr().String()
	h.dialer.mu.Unlock()
	return l
}

// TestTLSFlowSecondClientHello: a spliced TLS flow decided on its first
// ClientHello cannot carry a second plaintext one with another SNI, nor
// turn into something else than TLS records.
func TestTLSFlowSecondClientHello(t *testing.T) {
	h := startHarness(t, `{"allow_internet": false, "allow": {"domains": ["api.allowed.test"]}}`)
	up := startRawLog(t, h, "20.0.0.10:443")
	h.g.resolve(t, allowedHost)
	first := clientHello(t, allowedHost)
	ccs := record(recordCCS, []byte{1})
	cases := []struct {
		name   string
		after  []byte
		reason string
		want   []byte // what reaches the upstream
	}{
		{"another SNI", record(recordHandshake, helloMessage(t, "other.test")), ReasonSNI, first},
		{"another SNI after ChangeCipherSpec", cat(ccs, record(recordHandshake, helloMessage(t, "other.test"))), ReasonSNI, cat(first, ccs)},
		{"plain HTTP", []byte(get("other.test")), ReasonTLSRecord, first},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.counters.Snapshot()[c.reason]
			conn := dialFlow(t, h, "20.0.0.10:443")
			conn.Write(cat(first, c.after))
			io.Copy(io.Discard, conn)
			var got []byte
			select {
			case got = <-up.conns:
			case <-time.After(30 * time.Second):
				t.Fatal("the upstream connection was not closed")
			}
			if !bytes.Equal(got, c.want) {
				t.Errorf("the upstream got %d bytes (other.test in them: %v), want the %d before the refused record",
					len(got), bytes.Contains(got, []byte("other.test")), len(c.want))
			}
			if n := h.counters.Snapshot()[c.reason]; n != before+1 {
				t.Errorf("%s count %d, want %d", c.reason, n, before+1)
			}
		})
	}
	t.Run("a second ClientHello with the same SNI, then records", func(t *testing.T) {
		conn := dialFlow(t, h, "20.0.0.10:443")
		sent := cat(first, record(recordCCS, []byte{1}), record(recordHandshake, helloMessage(t, allowedHost)), record(recordAppData, []byte("opaque")))
		conn.Write(sent)
		conn.(interface{ CloseWrite() error }).CloseWrite()
		if got := <-up.conns; !bytes.Equal(got, sent) {
			t.Errorf("the upstream got %d bytes, want all %d", len(got), len(sent))
		}
	})
}

// TestLateFirstBytesAreDecided: a client that waits out the sniff deadline
// (the upstream silent too) is decided on its first bytes when they come,
// not spliced unchecked: a late request with another Host and a late
// ClientHello with another SNI are refused; a late allowed request works.
func TestLateFirstBytesAreDecided(t *testing.T) {
	old := sniffTimeout
	sniffTimeout = 50 * time.Millisecond
	t.Cleanup(func() { sniffTimeout = old })
	h := startHarness(t, `{"allow_internet": false, "allow": {"domains": ["api.allowed.test"]}}`)
	up := startHostLog(t, h, "20.0.0.10:80")
	raw := startRawLog(t, h, "20.0.0.10:443")
	h.g.resolve(t, allowedHost)
	// late waits well past the deadline: what is tested is the order of
	// events, not a duration.
	late := func() { time.Sleep(20 * sniffTimeout) }

	conn := dialFlow(t, h, "20.0.0.10:80")
	late()
	io.WriteString(conn, get("other.test"))
	readResponses(bufio.NewReader(conn))
	if got := up.requests(); len(got) != 0 {
		t.Errorf("a late request with Host other.test reached the upstream: %q", got)
	}

	conn = dialFlow(t, h, "20.0.0.10:443")
	late()
	conn.Write(clientHello(t, "other.test"))
	io.Copy(io.Discard, conn)
	if n := h.counters.Snapshot()[ReasonSNI]; n != 1 {
		t.Errorf("a late ClientHello for other.test: sni_mismatch count %d, want 1", n)
	}
	select {
	case b := <-raw.conns:
		if bytes.Contains(b, []byte("other.test")) {
			t.Errorf("the late ClientHello for other.test reached the upstream")
		}
	default:
	}

	conn = dialFlow(t, h, "20.0.0.10:80")
	late()
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: "+allowedHost+"\r\nConnection: close\r\n\r\n")
	if got := readResponses(bufio.NewReader(conn)); len(got) != 1 || got[0] != "host "+allowedHost+" len 0" {
		t.Errorf("a late allowed request: %q", got)
	}
}

// TestWebSocketUpgrade: a WebSocket upgrade as a flow's first request
// passes; the flow turns opaque only when the upstream answers 101. An
// upstream that ignores the upgrade leaves an HTTP flow, whose next request
// with another Host is refused.
func TestWebSocketUpgrade(t *testing.T) {
	h := startHarness(t, `{"allow_internet": false, "allow": {"domains": ["api.allowed.test"]}}`)
	up := startHostLog(t, h, "20.0.0.10:80")
	ws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		io.Copy(c, brw) // an echo of the "frames"
	}))
	t.Cleanup(ws.Close)
	h.dialer.mu.Lock()
	h.dialer.to["20.0.0.10:8080"] = ws.Listener.Addr().String()
	h.dialer.mu.Unlock()
	h.g.resolve(t, allowedHost)
	upgrade := "GET /ws HTTP/1.1\r\nHost: " + allowedHost + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"

	t.Run("answered 101: opaque", func(t *testing.T) {
		conn := dialFlow(t, h, "20.0.0.10:8080")
		br := bufio.NewReader(conn)
		io.WriteString(conn, upgrade)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade answer %v, %v", resp, err)
		}
		// After the switch the bytes are WebSocket data to the allowed
		// host, whatever they look like.
		frame := get("other.test")
		io.WriteString(conn, frame)
		echo := make([]byte, len(frame))
		if _, err := io.ReadFull(br, echo); err != nil || string(echo) != frame {
			t.Fatalf("echo %q, %v", echo, err)
		}
	})

	t.Run("ignored: still HTTP", func(t *testing.T) {
		before := h.counters.Snapshot()[ReasonHost]
		conn := dialFlow(t, h, "20.0.0.10:80")
		br := bufio.NewReader(conn)
		io.WriteString(conn, upgrade)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("answer to an ignored upgrade %v, %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		io.WriteString(conn, get("other.test"))
		if resp, err := http.ReadResponse(br, nil); err == nil {
			t.Errorf("a request with Host other.test after an ignored upgrade was answered: %s", resp.Status)
		}
		if got := up.requests(); len(got) != 1 || got[0] != allowedHost+" 0" {
			t.Errorf("the upstream got %q, want only the upgrade request", got)
		}
		if n := h.counters.Snapshot()[ReasonHost]; n != before+1 {
			t.Errorf("host_mismatch count %d, want %d", n, before+1)
		}
	})
}
