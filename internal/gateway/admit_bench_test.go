package gateway

import (
	"net/netip"
	"testing"
)

// BenchmarkAdmit: admission of one full-size TCP data frame, every frame's
// cost on the way in. BenchmarkAdmitBaseline is the copy the inbound loop
// makes of every frame anyway; report the ratio of the two.
func BenchmarkAdmit(b *testing.B) {
	frame := benchFrame()
	b.SetBytes(int64(len(frame)))
	for i := 0; i < b.N; i++ {
		if r := admit(frame); r != "" {
			b.Fatal(r)
		}
	}
}

func BenchmarkAdmitBaseline(b *testing.B) {
	frame := benchFrame()
	b.SetBytes(int64(len(frame)))
	var sink []byte
	for i := 0; i < b.N; i++ {
		sink = append(sink[:0], frame...)
	}
	_ = sink
}

// benchFrame is a guest frame of the MTU carrying a TCP segment.
func benchFrame() []byte {
	seg := tcpSYN(netip.AddrPortFrom(guestIP, guestPort), allowedDst, make([]byte, 1460))
	seg[13] = 0x10 // ACK, not SYN: a data segment
	return frameFromGuest(ipv4Packet{src: guestIP, dst: allowedDst.Addr(), proto: 6, payload: seg})
}
