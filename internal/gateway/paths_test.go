package gateway

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/gateway/dnsgw/dnstest"
	"github.com/spacesandbox/space/internal/gateway/gatewaytest"
	"github.com/spacesandbox/space/internal/sandboxnet"
)

// The paths around the gateway (catalogue D-1 to D-3): a guest that writes
// its own frames. Each forbidden destination has a live upstream behind it
// in the dialer, so a frame that got through would be seen there; each
// refusal is asserted by its counter, and the dialer is asserted never to
// have been asked.

var (
	guestIP     = sandboxnet.GuestPrefix.Addr()
	guestPort   = uint16(40000)
	otherMAC    = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x99}
	allowedDst  = netip.MustParseAddrPort("20.0.0.11:80")
	markerDst   = netip.MustParseAddrPort("20.0.0.12:80")
	resolverDNS = netip.MustParseAddrPort("8.8.8.8:53")
)

// rawHarness is a gateway with a RawGuest on its link and a live upstream
// behind every address the dialer knows.
type rawHarness struct {
	raw      *gatewaytest.RawGuest
	gw       *Sandbox
	dialer   *mapDialer
	counters *Counters
	accepts  map[string]*atomic.Int64 // connections accepted per sandbox-side address
	echoID   uint16
}

// startRawHarness attaches a gateway with policy; every address in dsts
// (HOST:PORT as the sandbox sees it) is mapped to a listener of its own.
func startRawHarness(t *testing.T, policy string, dsts ...string) *rawHarness {
	t.Helper()
	link, raw := gatewaytest.NewRawLink(t)
	return startRawHarnessOn(t, link, raw, policy, dsts...)
}

// startRawHarnessOn is startRawHarness on a given link.
func startRawHarnessOn(t *testing.T, link *driver.Link, raw *gatewaytest.RawGuest, policy string, dsts ...string) *rawHarness {
	t.Helper()
	p, err := egress.ParsePolicy([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	h := &rawHarness{raw: raw, dialer: &mapDialer{to: map[string]string{}}, counters: &Counters{}, accepts: map[string]*atomic.Int64{}}
	for _, d := range dsts {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		n := &atomic.Int64{}
		h.accepts[d] = n
		h.dialer.to[d] = ln.Addr().String()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				n.Add(1)
				c.Close()
			}
		}()
	}
	gw, err := Attach(link, Config{
		Sandbox: "sb-raw", Execution: "ex-raw", Policy: egress.NewHolder(p),
		Upstream: fakeResolver{}, Dialer: h.dialer, Counters: h.counters,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	h.gw = gw
	return h
}

// send writes frames on the link, then waits until the gateway has taken
// every one of them through admission and the stack (sync).
func (h *rawHarness) send(t *testing.T, frames ...[]byte) {
	t.Helper()
	for _, f := range frames {
		if err := h.raw.WriteFrame(f); err != nil {
			t.Fatalf("write frame: %v", err)
		}
	}
	h.sync(t)
}

// sync sends an echo request to the gateway and waits for its reply: the
// link is read in order, so every earlier frame has been admitted or
// refused (and counted) by then. Frames that came before the reply are
// returned.
func (h *rawHarness) sync(t *testing.T) [][]byte {
	t.Helper()
	h.echoID++
	id := h.echoID
	echo := frameFromGuest(ipv4Packet{src: guestIP, dst: sandboxnet.Gateway, proto: uint8(header.ICMPv4ProtocolNumber), payload: icmpEcho(id)})
	if err := h.raw.WriteFrame(echo); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var before [][]byte
	for {
		f := h.raw.Next(ctx)
		if f == nil {
			t.Fatalf("the gateway did not answer the sync echo %d", id)
		}
		if isEchoReply(f, id) {
			return before
		}
		before = append(before, f)
	}
}

func isEchoReply(f []byte, id uint16) bool {
	if len(f) < header.EthernetMinimumSize+header.IPv4MinimumSize+8 || header.Ethernet(f).Type() != header.IPv4ProtocolNumber {
		return false
	}
	ip := header.IPv4(f[header.EthernetMinimumSize:])
	if ip.TransportProtocol() != header.ICMPv4ProtocolNumber {
		return false
	}
	m := header.ICMPv4(ip.Payload())
	return m.Type() == header.ICMPv4EchoReply && binary.BigEndian.Uint16(m[4:]) == id
}

// expectCounted checks that the counter of each reason grew by want since
// before.
func (h *rawHarness) expectCounted(t *testing.T, before map[string]uint64, want map[string]uint64) {
	t.Helper()
	now := h.counters.Snapshot()
	for r, n := range want {
		if got := now[r] - before[r]; got != n {
			t.Errorf("reason %s counted %d times, want %d (counters %v)", r, got, n, now)
		}
	}
}

// expectUntouched checks that no upstream in dsts was dialled or reached.
func (h *rawHarness) expectUntouched(t *testing.T, dsts ...string) {
	t.Helper()
	for _, d := range dsts {
		if h.dialer.dialled(d) {
			t.Errorf("the gateway dialled %s for a refused frame", d)
		}
		if n := h.accepts[d].Load(); n != 0 {
			t.Errorf("the upstream behind %s accepted %d connections", d, n)
		}
	}
}

// TestFrameAdmission (D-1): spoofed, optioned, fragmented, tagged and
// oversize frames, and protocols the gateway does not offer, are dropped
// before the stack and counted by reason, under a policy that would allow
// the connection they carry. A well-formed SYN to the same destination is
// the control: it is answered and dialled.
func TestFrameAdmission(t *testing.T) {
	h := startRawHarness(t, `{"allow_internet": true}`, allowedDst.String(), markerDst.String())
	src := netip.AddrPortFrom(guestIP, guestPort)
	syn := func(from netip.Addr) []byte { return tcpSYN(netip.AddrPortFrom(from, guestPort), allowedDst, nil) }
	v4 := func(p ipv4Packet) ipv4Packet {
		if !p.src.IsValid() {
			p.src = guestIP
		}
		if !p.dst.IsValid() {
			p.dst = allowedDst.Addr()
		}
		if p.proto == 0 {
			p.proto = uint8(header.TCPProtocolNumber)
		}
		if p.payload == nil {
			p.payload = syn(p.src)
		}
		return p
	}
	whole := syn(guestIP)
	vlan := append([]byte{0x00, 0x05, 0x08, 0x00}, v4(ipv4Packet{}).bytes()...) // VID 5, inner IPv4
	cases := []struct {
		name   string
		frames [][]byte
		reason string
	}{
		{"spoofed source address (another guest's)", [][]byte{frameFromGuest(v4(ipv4Packet{src: netip.MustParseAddr("10.0.2.99")}))}, ReasonSpoofed},
		{"spoofed source address (public)", [][]byte{frameFromGuest(v4(ipv4Packet{src: netip.MustParseAddr("20.0.0.5")}))}, ReasonSpoofed},
		{"spoofed source MAC", [][]byte{ether(otherMAC, uint16(header.IPv4ProtocolNumber), v4(ipv4Packet{}).bytes())}, ReasonSpoofed},
		{"ARP claiming another address", [][]byte{ether(sandboxnet.GuestMAC, uint16(header.ARPProtocolNumber), arpPacket(sandboxnet.GuestMAC, netip.MustParseAddr("10.0.2.99"), sandboxnet.Gateway))}, ReasonSpoofed},
		{"ARP from another MAC", [][]byte{ether(sandboxnet.GuestMAC, uint16(header.ARPProtocolNumber), arpPacket(otherMAC, guestIP, sandboxnet.Gateway))}, ReasonSpoofed},
		{"IP options (NOPs)", [][]byte{frameFromGuest(v4(ipv4Packet{options: []byte{1, 1, 1, 0}}))}, ReasonIPOptions},
		{"IP options (loose source route)", [][]byte{frameFromGuest(v4(ipv4Packet{options: []byte{0x83, 7, 4, 20, 0, 0, 12, 0}}))}, ReasonIPOptions},
		{"fragments, first and non-first", [][]byte{
			frameFromGuest(v4(ipv4Packet{id: 7, more: true, payload: whole[:16]})),
			frameFromGuest(v4(ipv4Packet{id: 7, fragOff: 16, payload: whole[16:]})),
		}, ReasonFragment},
		{"overlapping fragments", [][]byte{
			frameFromGuest(v4(ipv4Packet{id: 8, more: true, payload: whole[:16]})),
			frameFromGuest(v4(ipv4Packet{id: 8, fragOff: 8, payload: whole[8:]})),
		}, ReasonFragment},
		{"GRE", [][]byte{frameFromGuest(v4(ipv4Packet{proto: protoGRE, payload: append([]byte{0, 0, 0x08, 0}, v4(ipv4Packet{}).bytes()...)}))}, ReasonProtocol},
		{"SCTP", [][]byte{frameFromGuest(v4(ipv4Packet{proto: protoSCTP, payload: make([]byte, 32)}))}, ReasonProtocol},
		{"IGMP", [][]byte{frameFromGuest(v4(ipv4Packet{proto: protoIGMP, dst: netip.MustParseAddr("224.0.0.22"), payload: []byte{0x16, 0, 0xfa, 0x04, 239, 1, 2, 3}}))}, ReasonProtocol},
		{"ICMP echo to an internet address", [][]byte{frameFromGuest(v4(ipv4Packet{proto: uint8(header.ICMPv4ProtocolNumber), payload: icmpEcho(999)}))}, ReasonICMP},
		{"VLAN tag", [][]byte{ether(sandboxnet.GuestMAC, 0x8100, vlan)}, ReasonEthertype},
		{"unknown ethertype", [][]byte{ether(sandboxnet.GuestMAC, 0x88b5, v4(ipv4Packet{}).bytes())}, ReasonEthertype},
		{"larger than the MTU", [][]byte{frameFromGuest(v4(ipv4Packet{payload: tcpSYN(src, allowedDst, make([]byte, sandboxnet.MTU))}))}, ReasonOversize},
		{"runt", [][]byte{make([]byte, 10)}, ReasonRunt},
		{"IPv4 header cut short", [][]byte{ether(sandboxnet.GuestMAC, uint16(header.IPv4ProtocolNumber), v4(ipv4Packet{}).bytes()[:12])}, ReasonMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.counters.Snapshot()
			h.send(t, c.frames...)
			h.expectCounted(t, before, map[string]uint64{c.reason: uint64(len(c.frames))})
			for _, f := range h.raw.Pending() {
				if flags, ok := tcpReplyFlags(f); ok && flags&header.TCPFlagSyn != 0 {
					t.Errorf("the gateway answered a refused frame with a SYN-ACK")
				}
				if isEchoReply(f, 999) {
					t.Errorf("the gateway answered an echo to %s", allowedDst.Addr())
				}
			}
		})
	}
	// The control: the same SYN, well formed, reaches the upstream. Then
	// none of the refused frames did.
	h.send(t, frameFromGuest(v4(ipv4Packet{dst: markerDst.Addr(), payload: tcpSYN(src, markerDst, nil)})))
	if !waitSynAck(t, h.raw) {
		t.Fatal("a well-formed SYN got no SYN-ACK: the harness cannot tell a refusal")
	}
	if !h.dialer.dialled(markerDst.String()) {
		t.Fatal("a well-formed SYN was not dialled")
	}
	h.expectUntouched(t, allowedDst.String())
}

// TestTapFrameLongerThanTheBufferRefused (D-1): on a tap, where one read is
// one frame and a read cuts a frame to its buffer, a jumbo frame whose first
// MTU bytes are a well-formed SYN (the rest Ethernet padding after the IP
// packet) is refused whole as oversize, never admitted as the SYN it starts
// with. The gateway's read buffer (inboundBuffer) is small, so this holds
// only while the buffer is longer than the largest admitted frame.
func TestTapFrameLongerThanTheBufferRefused(t *testing.T) {
	link, raw := gatewaytest.NewRawTapLink(t)
	h := startRawHarnessOn(t, link, raw, `{"allow_internet": true}`, allowedDst.String(), markerDst.String())
	src := netip.AddrPortFrom(guestIP, guestPort)
	// An IP packet of exactly the MTU: the frame's first maxLinkFrame
	// bytes are a frame admission takes.
	data := make([]byte, sandboxnet.MTU-header.IPv4MinimumSize-header.TCPMinimumSize)
	whole := frameFromGuest(ipv4Packet{src: guestIP, dst: allowedDst.Addr(), proto: uint8(header.TCPProtocolNumber), payload: tcpSYN(src, allowedDst, data)})
	if len(whole) != maxLinkFrame || admit(whole) != "" {
		t.Fatalf("the control frame is %d bytes, refused for %q: want %d bytes, admitted", len(whole), admit(whole), maxLinkFrame)
	}
	jumbo := append(append([]byte(nil), whole...), make([]byte, 9000-len(whole))...)
	before := h.counters.Snapshot()
	h.send(t, jumbo)
	h.expectCounted(t, before, map[string]uint64{ReasonOversize: 1})
	// The control: a well-formed SYN to another address reaches its
	// upstream, and the jumbo frame's destination was never dialled.
	h.send(t, frameFromGuest(ipv4Packet{src: guestIP, dst: markerDst.Addr(), proto: uint8(header.TCPProtocolNumber), payload: tcpSYN(src, markerDst, nil)}))
	if !waitSynAck(t, h.raw) {
		t.Fatal("a well-formed SYN got no SYN-ACK on the tap link: the harness cannot tell a refusal")
	}
	h.expectUntouched(t, allowedDst.String())
}

// waitSynAck waits for a SYN-ACK from the gateway.
func waitSynAck(t *testing.T, raw *gatewaytest.RawGuest) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for f := raw.Next(ctx); f != nil; f = raw.Next(ctx) {
		if flags, ok := tcpReplyFlags(f); ok && flags&(header.TCPFlagSyn|header.TCPFlagAck) == header.TCPFlagSyn|header.TCPFlagAck {
			return true
		}
	}
	return false
}

// TestIPv6Refused (D-2): the gateway has no IPv6. Whatever address a guest
// root configures, TCP to a public v6 address, to an IPv4-mapped, NAT64 or
// 6to4 address embedding an allowed IPv4 one, or to a link-local one, is
// dropped at the link and counted; a router advertisement, a neighbour
// solicitation for another address and an echo request get no answer.
// Under allow_internet, with an upstream behind each, a gateway that knew
// IPv6 would dial them.
func TestIPv6Refused(t *testing.T) {
	dsts := []string{"[2606:4700::1111]:80", allowedDst.String(), "[64:ff9b::1400:b]:80", "[2002:1400:b::1]:80", "[fe80::1]:80"}
	h := startRawHarness(t, `{"allow_internet": true}`, dsts...)
	global := netip.MustParseAddr("2001:db8:5::15")
	linkLocal := netip.MustParseAddr("fe80::5054:ff:fe12:3456")
	v6 := func(src, dst netip.Addr, next uint8, payload []byte) []byte {
		return ether(sandboxnet.GuestMAC, uint16(header.IPv6ProtocolNumber), ipv6Packet(src, dst, next, payload))
	}
	syn6 := func(src netip.Addr, dst string) []byte {
		d := netip.MustParseAddrPort(dst)
		return v6(src, d.Addr(), uint8(header.TCPProtocolNumber), tcpSYN(netip.AddrPortFrom(src, guestPort), d, nil))
	}
	allNodes := netip.MustParseAddr("ff02::1")
	ra := make([]byte, 12) // hop limit, flags, lifetime 1800 s, reachable, retrans
	ra[0], ra[2], ra[3] = 64, 0x07, 0x08
	other := netip.MustParseAddr("fe80::99")
	ns := append(make([]byte, 4), other.AsSlice()...)
	solicited := netip.MustParseAddr("ff02::1:ff00:99")
	cases := []struct {
		name  string
		frame []byte
	}{
		{"TCP to a public v6 address", syn6(global, "[2606:4700::1111]:80")},
		{"IPv4-mapped destination", syn6(global, "[::ffff:20.0.0.11]:80")},
		{"NAT64 embedding an allowed IPv4", syn6(global, "[64:ff9b::1400:b]:80")},
		{"6to4", syn6(global, "[2002:1400:b::1]:80")},
		{"link-local", syn6(linkLocal, "[fe80::1]:80")},
		{"router advertisement from the guest", v6(linkLocal, allNodes, uint8(header.ICMPv6ProtocolNumber), icmpv6(header.ICMPv6RouterAdvert, linkLocal, allNodes, ra))},
		{"neighbour solicitation for another address", v6(linkLocal, solicited, uint8(header.ICMPv6ProtocolNumber), icmpv6(header.ICMPv6NeighborSolicit, linkLocal, solicited, ns))},
		{"echo request", v6(global, netip.MustParseAddr("2606:4700::1111"), uint8(header.ICMPv6ProtocolNumber), icmpv6(header.ICMPv6EchoRequest, global, netip.MustParseAddr("2606:4700::1111"), []byte{0, 1, 0, 1}))},
		{"UDP (DHCPv6 solicit)", v6(linkLocal, netip.MustParseAddr("ff02::1:2"), uint8(header.UDPProtocolNumber), udpDatagram(netip.AddrPortFrom(linkLocal, 546), netip.MustParseAddrPort("[ff02::1:2]:547"), []byte{1, 0, 0, 1}))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.counters.Snapshot()
			h.send(t, c.frame)
			h.expectCounted(t, before, map[string]uint64{ReasonIPv6: 1})
			for _, f := range h.raw.Pending() {
				if len(f) >= header.EthernetMinimumSize && header.Ethernet(f).Type() == header.IPv6ProtocolNumber {
					t.Errorf("the gateway sent an IPv6 frame back: % x", f)
				}
			}
		})
	}
	h.expectUntouched(t, dsts...)
}

// TestOtherResolversRefused (D-3): DNS goes to the gateway's resolver
// only. UDP to port 53 of another resolver (a real one listens behind it),
// DNS over TCP and DoT to other resolvers are refused as
// dns_other_resolver even under allow_internet; QUIC to an allowed address
// is refused as udp.
func TestOtherResolversRefused(t *testing.T) {
	dot := netip.MustParseAddrPort("1.1.1.1:853")
	quic := netip.MustParseAddrPort("20.0.0.11:443")
	h := startRawHarness(t, `{"allow_internet": true}`, resolverDNS.String(), dot.String())
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resolver := dnstest.Start(pc, map[string][]netip.Addr{"exfil.attacker.test": {netip.MustParseAddr("20.0.0.66")}})
	t.Cleanup(resolver.Close)
	// The dialer opens TCP only; were the gateway ever to send UDP
	// upstream it would ask for resolverDNS, which expectUntouched checks.
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: 9, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName("exfil.attacker.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	query, _ := q.Pack()
	src := netip.AddrPortFrom(guestIP, guestPort)
	udp := func(dst netip.AddrPort, data []byte) []byte {
		return frameFromGuest(ipv4Packet{src: guestIP, dst: dst.Addr(), proto: uint8(header.UDPProtocolNumber), payload: udpDatagram(src, dst, data)})
	}
	tcp := func(dst netip.AddrPort) []byte {
		return frameFromGuest(ipv4Packet{src: guestIP, dst: dst.Addr(), proto: uint8(header.TCPProtocolNumber), payload: tcpSYN(src, dst, nil)})
	}
	cases := []struct {
		name   string
		frame  []byte
		reason string
		rst    bool
	}{
		{"UDP to another resolver's port 53", udp(resolverDNS, query), ReasonDNSResolver, false},
		{"DNS over TCP to another resolver", tcp(resolverDNS), ReasonDNSResolver, true},
		{"DoT (TCP 853)", tcp(dot), ReasonDNSResolver, true},
		{"UDP to port 853 (DNS over QUIC)", udp(dot, query), ReasonDNSResolver, false},
		{"QUIC (UDP 443) to an allowed address", udp(quic, []byte{0xc0, 0, 0, 0, 1}), ReasonUDP, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.counters.Snapshot()
			h.send(t, c.frame)
			if c.rst {
				waitCounted(t, h.counters, before, c.reason)
			}
			h.expectCounted(t, before, map[string]uint64{c.reason: 1})
		})
	}
	h.expectUntouched(t, resolverDNS.String(), dot.String())
	if n := resolver.Queries("exfil.attacker.test"); n != 0 {
		t.Errorf("the other resolver received %d queries", n)
	}
}

// waitCounted waits until reason has been counted once more than before:
// a TCP connection request is decided on a goroutine of its own, after the
// frame that carried it.
func waitCounted(t *testing.T, c *Counters, before map[string]uint64, reason string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for c.Snapshot()[reason] == before[reason] {
		if time.Now().After(deadline) {
			t.Fatalf("no %s counted: %v", reason, c.Snapshot())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDoHRefusedByDomain (D-3): DNS over HTTPS is a TLS flow like any
// other: a resolver's domain the policy does not name does not resolve,
// and its address, reached directly with its SNI, is refused by the
// policy, never dialled.
func TestDoHRefusedByDomain(t *testing.T) {
	h := startHarness(t, `{"allow_internet": false, "allow": {"domains": ["api.allowed.test"]}}`)
	h.dialer.mu.Lock()
	h.dialer.to["8.8.8.8:443"] = h.dialer.to["20.0.0.10:80"]
	h.dialer.mu.Unlock()
	if _, rc := h.g.resolve(t, "dns.google"); rc != dnsmessage.RCodeRefused {
		t.Errorf("dns.google resolved: %v, want REFUSED", rc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := h.g.dial(ctx, netip.MustParseAddrPort("8.8.8.8:443"))
	if err == nil {
		c.Close()
		t.Error("a TLS connection to a resolver outside the policy was accepted")
	}
	if h.dialer.dialled("8.8.8.8:443") {
		t.Error("the gateway dialled the DoH resolver")
	}
	if got := h.counters.Snapshot()[ReasonPolicy]; got != 1 {
		t.Errorf("policy refusals %d, want 1: %v", got, h.counters.Snapshot())
	}
}
