package gateway

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/gateway/gatewaytest"
)

// rebindingDNS is a real DNS server on UDP whose A answers for one name go
// round a list, one address per query, with TTL 0: what an attacker's
// authoritative server does to rebind an allowed name.
type rebindingDNS struct {
	pc    net.PacketConn
	name  string
	round []netip.Addr
	fixed map[string]netip.Addr

	mu sync.Mutex // guards next
	n  int
}

func startRebindingDNS(t *testing.T, name string, round []netip.Addr, fixed map[string]netip.Addr) *rebindingDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rebindingDNS{pc: pc, name: name, round: round, fixed: fixed}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.serve()
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return s
}

func (s *rebindingDNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var m dnsmessage.Message
		if m.Unpack(buf[:n]) != nil || len(m.Questions) != 1 {
			continue
		}
		q := m.Questions[0]
		name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
		m.Header.Response, m.Header.Authoritative, m.Answers = true, true, nil
		var a netip.Addr
		switch {
		case name == s.name:
			s.mu.Lock()
			a = s.round[s.n%len(s.round)]
			if q.Type == dnsmessage.TypeA {
				s.n++
			}
			s.mu.Unlock()
		case s.fixed[name].IsValid():
			a = s.fixed[name]
		default:
			m.Header.RCode = dnsmessage.RCodeNameError
		}
		if a.IsValid() && q.Type == dnsmessage.TypeA {
			m.Answers = []dnsmessage.Resource{{
				Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 0},
				Body:   &dnsmessage.AResource{A: a.As4()},
			}}
		}
		if out, err := m.Pack(); err == nil {
			s.pc.WriteTo(out, from)
		}
	}
}

func (s *rebindingDNS) resolver() *net.Resolver {
	addr := s.pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

// TestRebinding (D-4): an allowed name whose answers alternate, TTL 0,
// between a public address and a private one, loopback, the metadata
// address, the node's own address and the gateway's, resolved again and
// again through the real gateway: the public address is reached every
// time, the others never, though an upstream listens behind each and
// the name that resolved to them is allowed. An address learnt for one
// allowed domain is not reachable as another allowed domain.
func TestRebinding(t *testing.T) {
	public := netip.MustParseAddr("20.0.0.10")
	nodeAddr := netip.MustParseAddr("20.0.0.77")
	// Loopback is not in the round: a guest's own stack never sends it to
	// the link (TestLoopbackDestinationRefused crafts the frame instead).
	round := []netip.Addr{public, netip.MustParseAddr("10.1.2.3"), public, netip.MustParseAddr("169.254.169.254"),
		public, nodeAddr, public, netip.MustParseAddr("192.168.1.1")}
	dns := startRebindingDNS(t, "rebind.allowed.test", round, map[string]netip.Addr{"b.allowed.test": netip.MustParseAddr("20.0.0.11")})

	dsts := []string{"20.0.0.10:80", "20.0.0.11:80", "10.1.2.3:80", "169.254.169.254:80", "20.0.0.77:80", "192.168.1.1:80"}
	hits := map[string]*atomic.Int64{}
	dialer := &mapDialer{to: map[string]string{}}
	for _, d := range dsts {
		n := &atomic.Int64{}
		hits[d] = n
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			fmt.Fprintf(w, "upstream %s host %s", d, r.Host)
		}))
		t.Cleanup(srv.Close)
		dialer.to[d] = srv.Listener.Addr().String()
	}
	p, err := egress.ParsePolicy([]byte(`{"allow_internet": false, "allow": {"domains": ["rebind.allowed.test", "b.allowed.test"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	link, g := gatewaytest.NewLink(t)
	counters := &Counters{}
	gw, err := Attach(link, Config{
		Sandbox: "sb-rebind", Execution: "ex-rebind", Policy: egress.NewHolder(p),
		Upstream: dns.resolver(), Dialer: dialer, Counters: counters, HostAddrs: []netip.Addr{nodeAddr},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	h := &harness{g: &guest{g}, gw: gw, dialer: dialer, counters: counters}

	seen := map[netip.Addr]bool{}
	for i := 0; i < 2*len(round); i++ {
		addrs, rc := h.g.resolve(t, "rebind.allowed.test")
		if rc != dnsmessage.RCodeSuccess || len(addrs) != 1 {
			t.Fatalf("query %d: %v %v", i, addrs, rc)
		}
		a := addrs[0]
		seen[a] = true
		dst := netip.AddrPortFrom(a, 80).String()
		body, err := h.get(t, dst, "rebind.allowed.test")
		switch {
		case a == public && err != nil:
			t.Errorf("query %d: the public answer %s is not reachable: %v", i, a, err)
		case a != public && err == nil:
			t.Errorf("query %d: rebinding to %s reached it: %q", i, a, body)
		}
	}
	if len(seen) != len(round)/2+1 {
		t.Fatalf("the upstream's answers did not go round: saw %v", seen)
	}
	for _, d := range dsts[1:] {
		if d == "20.0.0.11:80" {
			continue
		}
		if dialer.dialled(d) || hits[d].Load() != 0 {
			t.Errorf("%s was dialled (%v) or reached (%d requests) after rebinding", d, dialer.dialled(d), hits[d].Load())
		}
	}
	if got, want := hits["20.0.0.10:80"].Load(), int64(len(round)); got != want {
		t.Errorf("the public address got %d requests, want %d", got, want)
	}
	snap := counters.Snapshot()
	if snap[ReasonPolicy] != uint64(2*(len(round)/2-1)) || snap[ReasonHostAddr] != 2 {
		t.Errorf("refusals: %v, want %d policy and 2 host_address", snap, 2*(len(round)/2-1))
	}

	// Domain A's address is not B's: the public address learnt for
	// rebind.allowed.test, asked for as b.allowed.test, is refused (Host),
	// and so is B's address, never resolved, by address alone; once B is
	// resolved, B's address serves B only.
	before := hits["20.0.0.10:80"].Load()
	if body, err := h.get(t, "20.0.0.10:80", "b.allowed.test"); err == nil {
		t.Errorf("rebind.allowed.test's address served b.allowed.test: %q", body)
	}
	if body, err := h.get(t, "20.0.0.11:80", "b.allowed.test"); err == nil {
		t.Errorf("b.allowed.test's address, never resolved, was reached: %q", body)
	}
	h.g.resolve(t, "b.allowed.test")
	if _, err := h.get(t, "20.0.0.11:80", "b.allowed.test"); err != nil {
		t.Errorf("b.allowed.test after resolving it: %v", err)
	}
	if body, err := h.get(t, "20.0.0.11:80", "rebind.allowed.test"); err == nil {
		t.Errorf("b.allowed.test's address served rebind.allowed.test: %q", body)
	}
	if hits["20.0.0.10:80"].Load() != before || hits["20.0.0.11:80"].Load() != 1 {
		t.Errorf("requests: A %d (want %d), B %d (want 1)", hits["20.0.0.10:80"].Load(), before, hits["20.0.0.11:80"].Load())
	}
}

// TestLoopbackDestinationRefused (D-4, D-6): a guest that writes its own
// frames can address loopback and 0.0.0.0 to the gateway, which a kernel
// never would; under allow_internet, with an upstream behind each, they
// are dropped at the link as martian destinations and never dialled (the
// policy would refuse them too: egress.TestAlwaysDenied).
func TestLoopbackDestinationRefused(t *testing.T) {
	dsts := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:80"), netip.MustParseAddrPort("127.1.2.3:8080"), netip.MustParseAddrPort("0.0.0.0:80")}
	var names []string
	for _, d := range dsts {
		names = append(names, d.String())
	}
	h := startRawHarness(t, `{"allow_internet": true}`, names...)
	for _, d := range dsts {
		before := h.counters.Snapshot()
		h.send(t, frameFromGuest(ipv4Packet{src: guestIP, dst: d.Addr(), proto: 6, payload: tcpSYN(netip.AddrPortFrom(guestIP, guestPort), d, nil)}))
		h.expectCounted(t, before, map[string]uint64{ReasonMartian: 1})
	}
	h.expectUntouched(t, names...)
}

// TestRedirectToMetadata (D-5): an allowed upstream answers with a 302 to
// the metadata address; the sandbox follows it and is refused by the
// policy, and the gateway never dials the metadata address, though a live
// upstream stands behind it.
func TestRedirectToMetadata(t *testing.T) {
	h := startHarness(t, `{"allow_internet": false, "allow": {"cidrs": ["20.0.0.13/32"]}}`)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/iam/security-credentials/", http.StatusFound)
	}))
	t.Cleanup(redirect.Close)
	h.dialer.mu.Lock()
	h.dialer.to["20.0.0.13:80"] = redirect.Listener.Addr().String()
	h.dialer.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := h.g.dial(ctx, netip.MustParseAddrPort("20.0.0.13:80"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: 20.0.0.13\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	c.Close()
	if err != nil || resp.StatusCode != http.StatusFound {
		t.Fatalf("the allowed upstream: %v %v", resp, err)
	}
	loc, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(loc.Hostname(), "80")
	for _, host := range []string{loc.Host, "20.0.0.13"} {
		if body, err := h.get(t, target, host); err == nil {
			t.Errorf("followed the redirect to %s (Host %s): %q", target, host, body)
		}
	}
	if h.dialer.dialled(target) {
		t.Errorf("the gateway dialled %s", target)
	}
	select {
	case r := <-h.requests:
		t.Errorf("the metadata upstream got a request: %s %s", r.Host, r.URL)
	default:
	}
	if got := h.counters.Snapshot()[ReasonPolicy]; got != 2 {
		t.Errorf("policy refusals %d, want 2: %v", got, h.counters.Snapshot())
	}
}
