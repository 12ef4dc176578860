// Package gatewaytest is a sandbox for tests of the gateway and its users: a
// userspace TCP/IP stack with the guest's address (sandboxnet) on the far
// end of a link, so that tests drive the gateway as a sandbox would without
// root, namespaces or a VM.
package gatewaytest

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/sandboxnet"
)

// Guest is the sandbox side of a link.
type Guest struct {
	S *stack.Stack
}

// NewLink returns the two ends of a stream-framed link (driver.FramingStream
// over a socketpair): the host end for gateway.Attach, and a Guest on the
// other. The guest goes away with the test.
func NewLink(t testing.TB) (*driver.Link, *Guest) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	host, guestEnd := os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "guest")
	return &driver.Link{File: host, Framing: driver.FramingStream}, newGuest(t, guestEnd)
}

func newGuest(t testing.TB, f *os.File) *Guest {
	t.Helper()
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	// As long as the gateway's queue (gateway.outboundQueueFrames): a full
	// queue drops, and a test starved of CPU stalled on retransmissions
	// (256: hundreds of them in one 3 MiB upload, TestHTTPFlowKeepAliveWorks).
	ep := channel.New(1024, sandboxnet.MTU+header.EthernetMinimumSize, tcpip.LinkAddress(sandboxnet.GuestMAC))
	if err := s.CreateNIC(1, ethernet.New(ep)); err != nil {
		t.Fatal(err)
	}
	pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddressWithPrefix{
		Address: tcpip.AddrFrom4(sandboxnet.GuestPrefix.Addr().As4()), PrefixLen: sandboxnet.GuestPrefix.Bits()}}
	if err := s.AddProtocolAddress(1, pa, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, Gateway: tcpip.AddrFrom4(sandboxnet.Gateway.As4()), NIC: 1}})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // stack -> link
		defer wg.Done()
		for {
			pkt := ep.ReadContext(ctx)
			if pkt == nil {
				return
			}
			v := pkt.ToView()
			pkt.DecRef()
			frame := v.AsSlice()
			out := make([]byte, 4+len(frame))
			binary.BigEndian.PutUint32(out, uint32(len(frame)))
			copy(out[4:], frame)
			v.Release()
			if _, err := f.Write(out); err != nil {
				return
			}
		}
	}()
	go func() { // link -> stack
		defer wg.Done()
		r := bufio.NewReader(f)
		for {
			var head [4]byte
			if _, err := io.ReadFull(r, head[:]); err != nil {
				return
			}
			frame := make([]byte, binary.BigEndian.Uint32(head[:]))
			if _, err := io.ReadFull(r, frame); err != nil {
				return
			}
			pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(frame)})
			ep.InjectInbound(0, pkt)
			pkt.DecRef()
		}
	}()
	t.Cleanup(func() {
		cancel()
		f.Close()
		ep.Close()
		s.Close()
		wg.Wait()
	})
	return &Guest{S: s}
}

// Dial connects from the guest to dst, through the gateway.
func (g *Guest) Dial(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	return gonet.DialContextTCP(ctx, g.S, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(dst.Addr().As4()), Port: dst.Port()}, ipv4.ProtocolNumber)
}

// Listen listens on the guest's port.
func (g *Guest) Listen(port uint16) (net.Listener, error) {
	return gonet.ListenTCP(g.S, tcpip.FullAddress{NIC: 1, Port: port}, ipv4.ProtocolNumber)
}

// DialUDP opens a UDP socket from the guest to dst.
func (g *Guest) DialUDP(dst netip.AddrPort) (net.Conn, error) {
	return gonet.DialUDP(g.S, nil, &tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(dst.Addr().As4()), Port: dst.Port()}, ipv4.ProtocolNumber)
}
