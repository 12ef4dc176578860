package gateway

import (
	"encoding/binary"
	"net"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/spacesandbox/space/internal/sandboxnet"
)

// Frame crafting for tests that play a hostile guest: every field set by
// hand, checksums right unless a test breaks them on purpose.

// Protocol numbers the gateway never offers.
const (
	protoIGMP = 2
	protoGRE  = 47
	protoSCTP = 132
)

// ether returns an Ethernet II frame from src to the gateway's MAC.
func ether(src net.HardwareAddr, typ uint16, payload []byte) []byte {
	f := make([]byte, header.EthernetMinimumSize+len(payload))
	header.Ethernet(f).Encode(&header.EthernetFields{
		SrcAddr: tcpip.LinkAddress(src), DstAddr: tcpip.LinkAddress(sandboxnet.GatewayMAC), Type: tcpip.NetworkProtocolNumber(typ),
	})
	copy(f[header.EthernetMinimumSize:], payload)
	return f
}

// ipv4Packet describes one IPv4 packet.
type ipv4Packet struct {
	src, dst netip.Addr
	proto    uint8
	options  []byte // a multiple of 4 bytes
	more     bool   // the more-fragments flag
	fragOff  uint16 // in bytes, a multiple of 8
	id       uint16
	payload  []byte
}

func (p ipv4Packet) bytes() []byte {
	hl := header.IPv4MinimumSize + len(p.options)
	b := make([]byte, hl+len(p.payload))
	b[0] = 0x40 | byte(hl/4)
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[4:], p.id)
	frag := p.fragOff / 8
	if p.more {
		frag |= 0x2000
	}
	binary.BigEndian.PutUint16(b[6:], frag)
	b[8] = 64
	b[9] = p.proto
	s, d := p.src.As4(), p.dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	copy(b[20:], p.options)
	copy(b[hl:], p.payload)
	ip := header.IPv4(b)
	ip.SetChecksum(^ip.CalculateChecksum())
	return b
}

// ipv6Packet returns an IPv6 packet.
func ipv6Packet(src, dst netip.Addr, next uint8, payload []byte) []byte {
	b := make([]byte, header.IPv6MinimumSize+len(payload))
	header.IPv6(b).Encode(&header.IPv6Fields{
		PayloadLength: uint16(len(payload)), TransportProtocol: tcpip.TransportProtocolNumber(next), HopLimit: 255,
		SrcAddr: tcpip.AddrFromSlice(src.AsSlice()), DstAddr: tcpip.AddrFromSlice(dst.AsSlice()),
	})
	copy(b[header.IPv6MinimumSize:], payload)
	return b
}

// seal sets the checksum at off of a TCP, UDP or ICMPv6 segment, over the
// pseudo-header of src and dst.
func seal(seg []byte, off int, proto tcpip.TransportProtocolNumber, src, dst netip.Addr) []byte {
	seg[off], seg[off+1] = 0, 0
	x := header.PseudoHeaderChecksum(proto, tcpip.AddrFromSlice(src.AsSlice()), tcpip.AddrFromSlice(dst.AsSlice()), uint16(len(seg)))
	binary.BigEndian.PutUint16(seg[off:], ^checksum.Checksum(seg, x))
	return seg
}

// tcpSYN returns a TCP SYN segment from src to dst, with data appended (a
// SYN may carry data; tests use it to make a packet long).
func tcpSYN(src, dst netip.AddrPort, data []byte) []byte {
	seg := make([]byte, header.TCPMinimumSize+len(data))
	header.TCP(seg).Encode(&header.TCPFields{
		SrcPort: src.Port(), DstPort: dst.Port(), SeqNum: 1000, DataOffset: header.TCPMinimumSize,
		Flags: header.TCPFlagSyn, WindowSize: 65535,
	})
	copy(seg[header.TCPMinimumSize:], data)
	return seal(seg, 16, header.TCPProtocolNumber, src.Addr(), dst.Addr())
}

// udpDatagram returns a UDP datagram from src to dst.
func udpDatagram(src, dst netip.AddrPort, data []byte) []byte {
	seg := make([]byte, header.UDPMinimumSize+len(data))
	header.UDP(seg).Encode(&header.UDPFields{SrcPort: src.Port(), DstPort: dst.Port(), Length: uint16(len(seg))})
	copy(seg[header.UDPMinimumSize:], data)
	return seal(seg, 6, header.UDPProtocolNumber, src.Addr(), dst.Addr())
}

// icmpEcho returns an ICMPv4 echo request.
func icmpEcho(id uint16) []byte {
	m := make([]byte, 16)
	m[0] = byte(header.ICMPv4Echo)
	binary.BigEndian.PutUint16(m[4:], id)
	binary.BigEndian.PutUint16(m[6:], 1)
	copy(m[8:], "gateway!")
	binary.BigEndian.PutUint16(m[2:], ^checksum.Checksum(m, 0))
	return m
}

// icmpv6 returns an ICMPv6 message of type typ with body after its 4-byte
// header.
func icmpv6(typ header.ICMPv6Type, src, dst netip.Addr, body []byte) []byte {
	m := make([]byte, 4+len(body))
	m[0] = byte(typ)
	copy(m[4:], body)
	return seal(m, 2, header.ICMPv6ProtocolNumber, src, dst)
}

// arpPacket returns an ARP request from senderMAC/senderIP for target.
func arpPacket(senderMAC net.HardwareAddr, senderIP, target netip.Addr) []byte {
	a := header.ARP(make([]byte, header.ARPSize))
	a.SetIPv4OverEthernet()
	a.SetOp(header.ARPRequest)
	s, t := senderIP.As4(), target.As4()
	copy(a.HardwareAddressSender(), senderMAC)
	copy(a.ProtocolAddressSender(), s[:])
	copy(a.ProtocolAddressTarget(), t[:])
	return a
}

// frameFromGuest is a well-formed IPv4 frame from the guest's MAC.
func frameFromGuest(p ipv4Packet) []byte {
	return ether(sandboxnet.GuestMAC, uint16(header.IPv4ProtocolNumber), p.bytes())
}

// isTCPReply reports whether f is an IPv4 TCP segment from the gateway with
// the SYN or RST flag, and which.
func tcpReplyFlags(f []byte) (header.TCPFlags, bool) {
	if len(f) < header.EthernetMinimumSize+header.IPv4MinimumSize+header.TCPMinimumSize ||
		header.Ethernet(f).Type() != header.IPv4ProtocolNumber {
		return 0, false
	}
	ip := header.IPv4(f[header.EthernetMinimumSize:])
	if !ip.IsValid(len(ip)) || ip.TransportProtocol() != header.TCPProtocolNumber {
		return 0, false
	}
	return header.TCP(ip.Payload()).Flags(), true
}
