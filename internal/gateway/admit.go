package gateway

import (
	"bytes"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/spacesandbox/space/internal/sandboxnet"
)

// Frame admission: what the sandbox may put on its link.
//
// Every frame from the guest is checked before the stack sees it, and a
// frame that fails is dropped and counted under its reason (no reply: an
// answer would only tell a scanner something). The stack is promiscuous and
// spoofing (it terminates every flow in the name of any destination), so
// this is the one place that knows what a sandbox may send at all:
//
//   - Ethernet II frames of at most the MTU, from the sandbox's own MAC
//     (sandboxnet.GuestMAC), carrying ARP or IPv4. VLAN tags, IPv6 and any
//     other ethertype are refused: the gateway has no IPv6 egress, so it has
//     no IPv6 at all (no addresses, no router advertisements, no neighbour
//     discovery), and a guest that configures an address itself reaches
//     nothing;
//   - ARP claiming the sandbox's own address (or none, for a probe);
//   - IPv4 from the sandbox's own address, with a header of exactly 20
//     bytes (no options: source routes and record-route have no use here),
//     never fragmented (the guest's MTU is the link's, so it has no reason
//     to fragment, and reassembly with overlaps is where stacks go wrong),
//     to anything but loopback (127/8) or 0/8, carrying TCP, UDP, or ICMP
//     to the gateway's own addresses. GRE, SCTP,
//     IGMP and every other protocol are refused.
//
// The sandbox's identity comes from the link the frame arrived on, never
// from an address in it; the source checks only keep a guest from making
// the stack talk to an address that is not the sandbox's (a flow opened in
// another source's name would still be decided by this sandbox's policy, and
// its answer would come back on this sandbox's link).
func (g *Sandbox) admitFrame(f []byte) bool {
	if reason := admit(f); reason != "" {
		g.cfg.Counters.add(g.cfg.Sandbox, reason)
		return false
	}
	return true
}

// maxLinkFrame is the largest frame the sandbox may send: the MTU and an
// untagged Ethernet header.
const maxLinkFrame = sandboxnet.MTU + header.EthernetMinimumSize

var guestAddr = sandboxnet.GuestPrefix.Addr()

// admit returns the reason f is refused, or "" when the stack may see it.
func admit(f []byte) string {
	switch {
	case len(f) < header.EthernetMinimumSize:
		return ReasonRunt
	case len(f) > maxLinkFrame:
		return ReasonOversize
	}
	eth := header.Ethernet(f)
	if !bytes.Equal(f[6:12], sandboxnet.GuestMAC) { // the source MAC
		return ReasonSpoofed
	}
	payload := f[header.EthernetMinimumSize:]
	switch eth.Type() {
	case header.ARPProtocolNumber:
		return admitARP(header.ARP(payload))
	case header.IPv4ProtocolNumber:
		return admitIPv4(header.IPv4(payload))
	case header.IPv6ProtocolNumber:
		return ReasonIPv6
	}
	return ReasonEthertype
}

// admitARP admits a well-formed IPv4-over-Ethernet ARP packet whose sender
// is the sandbox (its MAC, and its address or 0.0.0.0 for a probe).
func admitARP(a header.ARP) string {
	if len(a) < header.ARPSize || !a.IsValid() {
		return ReasonMalformed
	}
	if !bytes.Equal(a.HardwareAddressSender(), sandboxnet.GuestMAC) {
		return ReasonSpoofed
	}
	sender, _ := netip.AddrFromSlice(a.ProtocolAddressSender())
	if sender != guestAddr && sender != netip.IPv4Unspecified() {
		return ReasonSpoofed
	}
	return ""
}

// admitIPv4 admits an unfragmented IPv4 packet without options from the
// sandbox's address carrying TCP, UDP, or ICMP to the gateway.
func admitIPv4(ip header.IPv4) string {
	if !ip.IsValid(len(ip)) {
		return ReasonMalformed
	}
	if netip.AddrFrom4(ip.SourceAddress().As4()) != guestAddr {
		return ReasonSpoofed
	}
	if dst := netip.AddrFrom4(ip.DestinationAddress().As4()); dst.IsLoopback() || dst.As4()[0] == 0 {
		// No kernel sends these on a link; gVisor would drop them too, but
		// uncounted.
		return ReasonMartian
	}
	if ip.HeaderLength() != header.IPv4MinimumSize {
		return ReasonIPOptions
	}
	if ip.More() || ip.FragmentOffset() != 0 {
		return ReasonFragment
	}
	switch ip.TransportProtocol() {
	case header.TCPProtocolNumber, header.UDPProtocolNumber:
		return ""
	case header.ICMPv4ProtocolNumber:
		// In promiscuous mode the stack would answer an echo in the name of
		// any address, telling the sandbox a host is up that it can never
		// reach; the gateway's own addresses do answer.
		dst := netip.AddrFrom4(ip.DestinationAddress().As4())
		if dst != sandboxnet.Gateway && dst != sandboxnet.DNS {
			return ReasonICMP
		}
		return ""
	}
	return ReasonProtocol
}
