package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/gateway/gatewaytest"
	"github.com/spacesandbox/space/internal/sandboxnet"
)

// guest is the sandbox end of the test link.
type guest struct{ *gatewaytest.Guest }

func (g *guest) dial(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	return g.Dial(ctx, dst)
}

// resolve asks the gateway's DNS for name's A records.
func (g *guest) resolve(t testing.TB, name string) ([]netip.Addr, dnsmessage.RCode) {
	t.Helper()
	c, err := g.DialUDP(netip.AddrPortFrom(sandboxnet.DNS, 53))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: 7, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	b, _ := q.Pack()
	for attempt := 0; attempt < 5; attempt++ {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1500)
		n, err := c.Read(buf)
		if err != nil {
			continue // the first query may wait for ARP
		}
		var m dnsmessage.Message
		if err := m.Unpack(buf[:n]); err != nil {
			t.Fatal(err)
		}
		var out []netip.Addr
		for _, a := range m.Answers {
			if r, ok := a.Body.(*dnsmessage.AResource); ok {
				out = append(out, netip.AddrFrom4(r.A))
			}
		}
		return out, m.RCode
	}
	t.Fatalf("no DNS answer for %s", name)
	return nil, 0
}

// fakeResolver answers from a table.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	as, ok := f[strings.TrimSuffix(host, ".")]
	if !ok || network != "ip4" {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return as, nil
}

// mapDialer maps the addresses the sandbox sees to loopback test servers
// and records every dial: nothing it does not know is ever dialled.
type mapDialer struct {
	mu    sync.Mutex
	to    map[string]string
	dials []string
}

func (d *mapDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dials = append(d.dials, address)
	real, ok := d.to[address]
	d.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("connect %s: connection refused (test dialer)", address)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, real)
}

func (d *mapDialer) dialled(addr string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range d.dials {
		if a == addr {
			return true
		}
	}
	return false
}

type harness struct {
	g        *guest
	gw       *Sandbox
	dialer   *mapDialer
	counters *Counters
	requests chan *http.Request
}

func startHarness(t testing.TB, policy string) *harness {
	t.Helper()
	return startHarnessResolving(t, policy, fakeResolver{"api.allowed.test": {netip.MustParseAddr("20.0.0.10")}, "other.test": {netip.MustParseAddr("20.0.0.11")}, "internal.test": {netip.MustParseAddr("10.1.2.3")}})
}

// startHarnessResolving is startHarness with the names the gateway's DNS
// upstream knows.
func startHarnessResolving(t testing.TB, policy string, names fakeResolver) *harness {
	t.Helper()
	link, g := gatewaytest.NewLink(t)
	p, err := egress.ParsePolicy([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{requests: make(chan *http.Request, 16), counters: &Counters{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.requests <- r
		fmt.Fprintf(w, "hello from upstream, host %s", r.Host)
	}))
	t.Cleanup(srv.Close)
	up := srv.Listener.Addr().String()
	h.dialer = &mapDialer{to: map[string]string{
		"20.0.0.10:80": up, "20.0.0.11:80": up, "20.0.0.12:443": up, "10.1.2.3:80": up, "169.254.169.254:80": up,
	}}
	gw, err := Attach(link, Config{
		Sandbox: "sb1", Execution: "ex1",
		Policy:   egress.NewHolder(p),
		Upstream: names,
		Dialer:   h.dialer, Counters: h.counters,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	h.gw = gw
	h.g = &guest{g}
	return h
}

// get makes an HTTP request from the guest to dst with the given Host.
func (h *harness) get(t testing.TB, dst, hostHeader string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := h.g.dial(ctx, netip.MustParseAddrPort(dst))
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", hostHeader)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestAllowedDomainReachable(t *testing.T) {
	h := startHarness(t, `{"allow_internet": false, "allow": {"domains": ["api.allowed.test"]}}`)
	addrs, rc := h.g.resolve(t, "api.allowed.test")
	if rc != dnsmessage.RCodeSuccess || len(addrs) != 1 || addrs[0] != netip.MustParseAddr("20.0.0.10") {
		t.Fatalf("resolve: %v %v", addrs, rc)
	}
	body, err := h.get(t, "20.0.0.10:80", "api.allowed.test")
	if err != nil || !strings.Contains(body, "host api.allowed.test") {
		t.Fatalf("GET allowed: %q, %v", body, err)
	}
	if got := h.counters.Snapshot()[ReasonAllowed]; got != 1 {
		t.Errorf("allowed count %d, want 1", got)
	}
}

func TestRefusals(t *testing.T) {
	h := startHarness(t, `{"allow_internet": false, "allow": {"domains": ["api.allowed.test"]}}`)
	if _, rc := h.g.resolve(t, "other.test"); rc != dnsmessage.RCodeRefused {
		t.Errorf("query for a name outside the policy: %v, want REFUSED", rc)
	}
	h.g.resolve(t, "api.allowed.test")
	cases := []struct{ name, dst, host string }{
		{"raw address not in the policy", "20.0.0.11:80", "other.test"},
		{"private address", "10.1.2.3:80", "internal.test"},
		{"metadata address", "169.254.169.254:80", "metadata"},
		{"the gateway itself", sandboxnet.Gateway.String() + ":80", "x"},
		{"DNS over TCP", sandboxnet.DNS.String() + ":53", "x"},
	}
	for _, c := range cases {
		if body, err := h.get(t, c.dst, c.host); err == nil {
			t.Errorf("%s (%s): reached: %q", c.name, c.dst, body)
		}
	}
	for _, a := range []string{"20.0.0.11:80", "10.1.2.3:80", "169.254.169.254:80"} {
		if h.dialer.dialled(a) {
			t.Errorf("the gateway dialled %s, which the policy refuses", a)
		}
	}
	// Right address, wrong Host: the connection was allowed for
	// api.allowed.test only.
	if body, err := h.get(t, "20.0.0.10:80", "other.test"); err == nil {
		t.Errorf("Host other.test on a connection allowed for api.allowed.test: reached: %q", body)
	}
	select {
	case r := <-h.requests:
		t.Errorf("upstream got a request it should not: Host %s", r.Host)
	default:
	}
	snap := h.counters.Snapshot()
	for _, r := range []string{ReasonPolicy, ReasonGatewayAddr, ReasonDNSOverTCP, ReasonHost} {
		if snap[r] == 0 {
			t.Errorf("no %s refusal counted: %v", r, snap)
		}
	}
}

func TestLivePolicyUpdate(t *testing.T) {
	h := startHarness(t, `{"allow_internet": false}`)
	if _, err := h.get(t, "20.0.0.11:80", "20.0.0.11"); err == nil {
		t.Fatal("reached 20.0.0.11 under allow_internet=false")
	}
	p, err := egress.ParsePolicy([]byte(`{"allow_internet": false, "allow": {"cidrs": ["20.0.0.11/32"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	h.gw.cfg.Policy.Store(p)
	if body, err := h.get(t, "20.0.0.11:80", "20.0.0.11"); err != nil {
		t.Fatalf("after the update: %v", err)
	} else if !strings.Contains(body, "hello") {
		t.Fatalf("body %q", body)
	}
}

func TestUnreachableUpstreamIsRefused(t *testing.T) {
	h := startHarness(t, `{"allow_internet": true}`)
	_, err := h.get(t, "20.0.0.99:80", "20.0.0.99")
	if err == nil {
		t.Fatal("a connection to an unreachable upstream was accepted")
	}
	if !h.dialer.dialled("20.0.0.99:80") {
		t.Fatal("the gateway did not try the upstream")
	}
	if h.counters.Snapshot()[ReasonUnreachable] == 0 {
		t.Error("no upstream_unreachable counted")
	}
}

func TestCloseEndsFlows(t *testing.T) {
	h := startHarness(t, `{"allow_internet": true}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h.dialer.mu.Lock()
	h.dialer.to["20.0.0.50:22"] = ln.Addr().String()
	h.dialer.mu.Unlock()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := h.g.dial(ctx, netip.MustParseAddrPort("20.0.0.50:22"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	up := <-accepted
	defer up.Close()
	h.gw.Close()
	up.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := up.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("upstream side still open after Close: %v", err)
	}
}

// TestServerSpeaksFirst: a protocol where the server talks first (SSH,
// SMTP) works, and at once: the gateway stops waiting for the client's
// first bytes as soon as the server speaks (with a sniff timeout longer
// than the test's deadline, a gateway that waited for it would fail).
func TestServerSpeaksFirst(t *testing.T) {
	old := sniffTimeout
	sniffTimeout = 10 * time.Minute
	t.Cleanup(func() { sniffTimeout = old })
	h := startHarness(t, `{"allow_internet": true}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "SSH-2.0-test\r\n")
		buf := make([]byte, 5)
		if _, err := io.ReadFull(c, buf); err == nil {
			c.Write(buf)
		}
	}()
	h.dialer.mu.Lock()
	h.dialer.to["20.0.0.70:22"] = ln.Addr().String()
	h.dialer.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := h.g.dial(ctx, netip.MustParseAddrPort("20.0.0.70:22"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	banner, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || banner != "SSH-2.0-test\r\n" {
		t.Fatalf("banner %q, %v", banner, err)
	}
	io.WriteString(c, "hello")
	echo := make([]byte, 5)
	if _, err := io.ReadFull(c, echo); err != nil || string(echo) != "hello" {
		t.Fatalf("echo %q, %v", echo, err)
	}
}

// TestManySequentialConnections: a guest that opens and closes connections
// one after another (ports picked at random, reused while the gateway's side
// of an earlier flow may still be in TIME_WAIT) is never left hanging.
func TestManySequentialConnections(t *testing.T) {
	h := startHarness(t, `{"allow_internet": true}`)
	go func() {
		for range h.requests {
		}
	}()
	for i := 0; i < 300; i++ {
		if _, err := h.get(t, "20.0.0.11:80", "20.0.0.11"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
}

// stubInterceptor records the flows handed to it.
type stubInterceptor struct {
	host  string
	flows chan Flow
	first chan byte
}

func (s *stubInterceptor) Applies(_ context.Context, host string) bool { return host == s.host }

func (s *stubInterceptor) Serve(ctx context.Context, client net.Conn, f Flow, dial func(context.Context) (net.Conn, error)) error {
	defer client.Close()
	s.flows <- f
	b := make([]byte, 1)
	if _, err := io.ReadFull(client, b); err == nil {
		s.first <- b[0]
	}
	up, err := dial(ctx)
	if err == nil {
		up.Close()
	}
	return err
}

// tlsHello starts a TLS handshake from the guest with the given SNI and
// returns when the connection ends (the gateway refuses or the stub closes).
func (h *harness) tlsHello(t testing.TB, dst, sni string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := h.g.dial(ctx, netip.MustParseAddrPort(dst))
	if err != nil {
		t.Fatalf("dial %s: %v", dst, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	_ = tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).HandshakeContext(ctx)
}

func TestTLSFlows(t *testing.T) {
	h := startHarness(t, `{"allow_internet": false, "allow": {"domains": ["api.allowed.test"]}}`)
	stub := &stubInterceptor{host: "api.allowed.test", flows: make(chan Flow, 4), first: make(chan byte, 4)}
	h.gw.cfg.Interceptor = stub
	h.dialer.mu.Lock()
	h.dialer.to["20.0.0.10:443"] = h.dialer.to["20.0.0.10:80"]
	h.dialer.mu.Unlock()
	h.g.resolve(t, "api.allowed.test")

	// SNI of another name on a connection allowed for api.allowed.test.
	h.tlsHello(t, "20.0.0.10:443", "other.test")
	if h.counters.Snapshot()[ReasonSNI] != 1 {
		t.Errorf("SNI mismatch not refused: %v", h.counters.Snapshot())
	}
	select {
	case f := <-stub.flows:
		t.Fatalf("a flow with a mismatched SNI was intercepted: %+v", f)
	default:
	}

	// The right SNI, with a credential rule: intercepted, the ClientHello
	// replayed from its first byte.
	h.tlsHello(t, "20.0.0.10:443", "api.allowed.test")
	select {
	case f := <-stub.flows:
		if f.SNI != "api.allowed.test" || f.Domain != "api.allowed.test" || f.Dst.String() != "20.0.0.10:443" {
			t.Errorf("flow %+v", f)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the flow was not intercepted")
	}
	if b := <-stub.first; b != 0x16 {
		t.Errorf("the interceptor's first byte is %#x, want the TLS record 0x16", b)
	}
	if h.counters.Snapshot()[ReasonIntercepted] != 1 {
		t.Errorf("intercepted count: %v", h.counters.Snapshot())
	}
}

// TestDialGuest: ingress reaches a port the guest listens on, through the
// link; a closed port is refused.
func TestDialGuest(t *testing.T) {
	h := startHarness(t, `{"allow_internet": false}`)
	ln, err := h.g.Listen(8080)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(c, "from %s", c.RemoteAddr())
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := h.gw.DialGuest(ctx, 8080)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(b), "from "+sandboxnet.Gateway.String()) {
		t.Fatalf("guest saw %q", b)
	}
	if _, err := h.gw.DialGuest(ctx, 8081); err == nil {
		t.Fatal("a closed guest port accepted")
	}
}

// TestHostAddressRefused: the node's own addresses are refused even when
// the policy allows the internet.
func TestHostAddressRefused(t *testing.T) {
	h := startHarness(t, `{"allow_internet": true}`)
	h.gw.cfg.HostAddrs = []netip.Addr{netip.MustParseAddr("20.0.0.11")}
	if body, err := h.get(t, "20.0.0.11:80", "20.0.0.11"); err == nil {
		t.Fatalf("reached the node's own address: %q", body)
	}
	if h.dialer.dialled("20.0.0.11:80") {
		t.Error("the gateway dialled the node's own address")
	}
	if h.counters.Snapshot()[ReasonHostAddr] != 1 {
		t.Errorf("counters %v", h.counters.Snapshot())
	}
}
