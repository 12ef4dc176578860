package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/egress"
)

// BenchmarkHTTPThroughGateway: one connection per request (dial, HTTP GET,
// close) from a guest stack through the gateway to a loopback server: the
// gateway's per-connection cost (decision, upstream dial, sniff, splice).
// BenchmarkHTTPDirect is the same request without the gateway.
func BenchmarkHTTPThroughGateway(b *testing.B) {
	h := startHarness(b, `{"allow_internet": true}`)
	go func() {
		for range h.requests {
		}
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := h.get(b, "20.0.0.11:80", "20.0.0.11"); err != nil {
			b.Fatalf("request %d: %v (open flows %d)", i, err, len(h.gw.flows))
		}
	}
}

func BenchmarkHTTPDirect(b *testing.B) {
	h := startHarness(b, `{"allow_internet": true}`)
	go func() {
		for range h.requests {
		}
	}()
	addr := h.dialer.to["20.0.0.11:80"]
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		c.Close()
	}
}

// BenchmarkStreamThroughGateway: bulk bytes from an upstream to the guest
// over one spliced flow (b.SetBytes: MB/s is the gateway's throughput).
func BenchmarkStreamThroughGateway(b *testing.B) {
	h := startHarness(b, `{"allow_internet": true}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	const chunk = 1 << 20
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, chunk)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	h.dialer.mu.Lock()
	h.dialer.to["20.0.0.60:9000"] = ln.Addr().String()
	h.dialer.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := h.g.dial(ctx, netip.MustParseAddrPort("20.0.0.60:9000"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, chunk)
	// The first read waits out the gateway's sniff of a silent client.
	if _, err := io.ReadFull(c, buf); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(chunk)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKeepAliveThroughGateway: sequential HTTP/1.1 requests on one
// keep-alive flow from the guest through the gateway to a loopback server,
// each with a small Content-Length body: the per-request cost of the
// guest→upstream direction once the flow is open (ns/op is one request and
// its response).
func BenchmarkKeepAliveThroughGateway(b *testing.B) {
	h := startHarness(b, `{"allow_internet": false, "allow": {"domains": ["api.allowed.test"]}}`)
	go func() {
		for range h.requests {
		}
	}()
	h.g.resolve(b, "api.allowed.test")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := h.g.dial(ctx, netip.MustParseAddrPort("20.0.0.10:80"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	const req = "POST /v1/items HTTP/1.1\r\nHost: api.allowed.test\r\nUser-Agent: bench\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"item\":\"value\"}"
	do := func() {
		if _, err := io.WriteString(c, req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	do()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		do()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// benchStream is 1000 keep-alive requests like BenchmarkKeepAliveThroughGateway's.
func benchStream() []byte {
	const req = "POST /v1/items HTTP/1.1\r\nHost: api.allowed.test\r\nUser-Agent: bench\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"item\":\"value\"}"
	return bytes.Repeat([]byte(req), 1000)
}

// BenchmarkCopyRequests: the guest→upstream copy of a plaintext flow with
// every request decided (copyRequests) by the gateway's check, in memory:
// the parse's own cost. ns/op is 1000 requests.
func BenchmarkCopyRequests(b *testing.B) {
	in := benchStream()
	check := benchChecker(b)
	b.SetBytes(int64(len(in)))
	for i := 0; i < b.N; i++ {
		if err := copyRequests(io.Discard, bytes.NewReader(in), check, nil); err != io.EOF {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopyRequestsLargeBody: one request with an 8 MiB Content-Length
// body: the body is copied through the reader's buffer, not parsed.
func BenchmarkCopyRequestsLargeBody(b *testing.B) {
	in := append([]byte("POST / HTTP/1.1\r\nHost: api.allowed.test\r\nContent-Length: 8388608\r\n\r\n"), make([]byte, 8<<20)...)
	check := benchChecker(b)
	b.SetBytes(int64(len(in)))
	for i := 0; i < b.N; i++ {
		if err := copyRequests(io.Discard, bytes.NewReader(in), check, nil); err != io.EOF {
			b.Fatal(err)
		}
	}
}

// benchChecker is the gateway's check for a flow allowed for allowedHost.
func benchChecker(b *testing.B) func(string) error {
	p, err := egress.ParsePolicy([]byte(`{"allow_internet": false, "allow": {"domains": ["` + allowedHost + `"]}}`))
	if err != nil {
		b.Fatal(err)
	}
	return hostChecker(egress.NewHolder(p), candidates{names: []string{allowedHost}})
}
