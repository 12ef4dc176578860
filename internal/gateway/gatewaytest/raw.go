package gatewaytest

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/sandboxnet"
)

// RawGuest is the sandbox side of a link with no stack behind it: a test
// writes the Ethernet frames it crafts, byte for byte, and reads the ones
// the gateway sends. It answers the gateway's ARP requests for the guest's
// address (with sandboxnet.GuestMAC), so that replies to the frames it
// sends from that address can come back; every other frame, those ARP
// requests included, is delivered to Frames.
type RawGuest struct {
	f      *os.File
	tap    bool       // one message per frame (FramingTap), not length-prefixed
	mu     sync.Mutex // serialises writes
	frames chan []byte
}

// NewRawLink returns the two ends of a stream-framed link: the host end for
// gateway.Attach, and a RawGuest on the other. The guest goes away with the
// test.
func NewRawLink(t testing.TB) (*driver.Link, *RawGuest) {
	return newRawLink(t, unix.SOCK_STREAM, driver.FramingStream)
}

// NewRawTapLink is NewRawLink with the framing of a tap (driver.FramingTap,
// the ns runtime's link): a seqpacket socketpair, on which one read is one
// frame and a frame longer than the reader's buffer is cut to it, as a tap's
// read cuts it.
func NewRawTapLink(t testing.TB) (*driver.Link, *RawGuest) {
	return newRawLink(t, unix.SOCK_SEQPACKET, driver.FramingTap)
}

func newRawLink(t testing.TB, sockType int, framing driver.LinkFraming) (*driver.Link, *RawGuest) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, sockType|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	host, guest := os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "raw-guest")
	g := &RawGuest{f: guest, tap: framing == driver.FramingTap, frames: make(chan []byte, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.read()
	}()
	t.Cleanup(func() {
		guest.Close()
		<-done
	})
	return &driver.Link{File: host, Framing: framing}, g
}

// WriteFrame sends one frame to the gateway as it is: no length or content
// check.
func (g *RawGuest) WriteFrame(frame []byte) error {
	if g.tap {
		g.mu.Lock()
		defer g.mu.Unlock()
		_, err := g.f.Write(frame)
		return err
	}
	out := make([]byte, 4+len(frame))
	binary.BigEndian.PutUint32(out, uint32(len(frame)))
	copy(out[4:], frame)
	g.mu.Lock()
	defer g.mu.Unlock()
	_, err := g.f.Write(out)
	return err
}

// Next returns the next frame the gateway sent, or nil when ctx ends first.
func (g *RawGuest) Next(ctx context.Context) []byte {
	select {
	case f := <-g.frames:
		return f
	case <-ctx.Done():
		return nil
	}
}

// Pending returns the frames received and not yet read, without waiting.
func (g *RawGuest) Pending() [][]byte {
	var out [][]byte
	for {
		select {
		case f := <-g.frames:
			out = append(out, f)
		default:
			return out
		}
	}
}

func (g *RawGuest) read() {
	r := bufio.NewReader(g.f)
	for {
		var frame []byte
		if g.tap {
			buf := make([]byte, 64<<10)
			n, err := g.f.Read(buf)
			if err != nil {
				return
			}
			frame = buf[:n]
		} else {
			var head [4]byte
			if _, err := io.ReadFull(r, head[:]); err != nil {
				return
			}
			frame = make([]byte, binary.BigEndian.Uint32(head[:]))
			if _, err := io.ReadFull(r, frame); err != nil {
				return
			}
		}
		if reply := arpReply(frame); reply != nil {
			_ = g.WriteFrame(reply)
		}
		select {
		case g.frames <- frame:
		default: // a test that does not read loses what comes after 1024 frames
		}
	}
}

// arpReply returns the answer to an ARP request for the guest's address,
// or nil.
func arpReply(frame []byte) []byte {
	if len(frame) < header.EthernetMinimumSize+header.ARPSize || header.Ethernet(frame).Type() != header.ARPProtocolNumber {
		return nil
	}
	req := header.ARP(frame[header.EthernetMinimumSize:])
	guest := sandboxnet.GuestPrefix.Addr().As4()
	if !req.IsValid() || req.Op() != header.ARPRequest || string(req.ProtocolAddressTarget()) != string(guest[:]) {
		return nil
	}
	out := make([]byte, header.EthernetMinimumSize+header.ARPSize)
	header.Ethernet(out).Encode(&header.EthernetFields{
		SrcAddr: tcpip.LinkAddress(sandboxnet.GuestMAC), DstAddr: header.Ethernet(frame).SourceAddress(), Type: header.ARPProtocolNumber,
	})
	a := header.ARP(out[header.EthernetMinimumSize:])
	a.SetIPv4OverEthernet()
	a.SetOp(header.ARPReply)
	copy(a.HardwareAddressSender(), sandboxnet.GuestMAC)
	copy(a.ProtocolAddressSender(), guest[:])
	copy(a.HardwareAddressTarget(), req.HardwareAddressSender())
	copy(a.ProtocolAddressTarget(), req.ProtocolAddressSender())
	return out
}
