package gateway

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/spacesandbox/space/internal/sandboxnet"
)

// FuzzAdmit: admission never panics on any frame, and every frame it lets
// through has, read byte by byte here without gVisor's parsers, the shape
// the stack may see: at most the MTU, from the sandbox's MAC, ARP from the
// sandbox, or IPv4 from the sandbox's address with a 20-byte header, no
// fragment, not to loopback or 0/8, carrying TCP, UDP or ICMP to the
// gateway. An IPv6 frame is never admitted.
func FuzzAdmit(f *testing.F) {
	src := netip.AddrPortFrom(guestIP, guestPort)
	syn := tcpSYN(src, allowedDst, nil)
	good := ipv4Packet{src: guestIP, dst: allowedDst.Addr(), proto: 6, payload: syn}
	f.Add(frameFromGuest(good))
	f.Add(frameFromGuest(ipv4Packet{src: guestIP, dst: sandboxnet.Gateway, proto: 1, payload: icmpEcho(1)}))
	f.Add(ether(sandboxnet.GuestMAC, 0x0806, arpPacket(sandboxnet.GuestMAC, guestIP, sandboxnet.Gateway)))
	f.Add(frameFromGuest(ipv4Packet{src: guestIP, dst: allowedDst.Addr(), proto: 6, more: true, payload: syn[:16]}))
	f.Add(frameFromGuest(ipv4Packet{src: guestIP, dst: allowedDst.Addr(), proto: 6, options: []byte{1, 1, 1, 0}, payload: syn}))
	f.Add(ether(sandboxnet.GuestMAC, 0x86dd, ipv6Packet(netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2606:4700::1111"), 6, syn)))
	f.Add(ether(sandboxnet.GuestMAC, 0x8100, append([]byte{0, 5, 8, 0}, good.bytes()...)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		if admit(frame) != "" {
			return
		}
		if len(frame) < 14 || len(frame) > sandboxnet.MTU+14 {
			t.Fatalf("admitted a frame of %d bytes", len(frame))
		}
		if !bytes.Equal(frame[6:12], sandboxnet.GuestMAC) {
			t.Fatalf("admitted a frame from MAC % x", frame[6:12])
		}
		guest := guestIP.As4()
		p := frame[14:]
		switch binary.BigEndian.Uint16(frame[12:14]) {
		case 0x0806:
			if len(p) < 28 || !bytes.Equal(p[8:14], sandboxnet.GuestMAC) ||
				!bytes.Equal(p[14:18], guest[:]) && !bytes.Equal(p[14:18], []byte{0, 0, 0, 0}) {
				t.Fatalf("admitted ARP % x", p)
			}
		case 0x0800:
			if len(p) < 20 || p[0] != 0x45 {
				t.Fatalf("admitted IPv4 with version/IHL %#x", p)
			}
			if tl := int(binary.BigEndian.Uint16(p[2:4])); tl < 20 || tl > len(p) {
				t.Fatalf("admitted IPv4 of total length %d in %d bytes", tl, len(p))
			}
			if binary.BigEndian.Uint16(p[6:8])&0x3fff != 0 {
				t.Fatalf("admitted a fragment: flags/offset %#x", p[6:8])
			}
			if !bytes.Equal(p[12:16], guest[:]) {
				t.Fatalf("admitted IPv4 from % x", p[12:16])
			}
			if p[16] == 127 || p[16] == 0 {
				t.Fatalf("admitted IPv4 to % x", p[16:20])
			}
			switch p[9] {
			case 6, 17:
			case 1:
				gw, dns := sandboxnet.Gateway.As4(), sandboxnet.DNS.As4()
				if !bytes.Equal(p[16:20], gw[:]) && !bytes.Equal(p[16:20], dns[:]) {
					t.Fatalf("admitted ICMP to % x", p[16:20])
				}
			default:
				t.Fatalf("admitted IP protocol %d", p[9])
			}
		default:
			t.Fatalf("admitted ethertype %#x", frame[12:14])
		}
	})
}
