package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/sandboxnet"
	"github.com/spacesandbox/space/internal/testenv"
)

// sandboxNetns is a network namespace set up as an ns sandbox's: a tap
// named eth0 with the guest's MAC, address and default route, whose fd is
// the gateway's link.
type sandboxNetns struct {
	t    *testing.T
	path string
}

func newSandboxNetns(t *testing.T) (*sandboxNetns, *driver.Link) {
	t.Helper()
	testenv.RequiresRoot(t)
	testenv.RequiresTool(t, "ip")
	var b [4]byte
	rand.Read(b[:])
	name := "spc-gwpath-" + hex.EncodeToString(b[:])
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	n := &sandboxNetns{t: t, path: "/run/netns/" + name}
	var fd int
	n.do(func() error {
		var err error
		if fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0); err != nil {
			return err
		}
		ifr, err := unix.NewIfreq(sandboxnet.IfName)
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return err
		}
		return sandboxnet.Configure(sandboxnet.IfName, true)
	})
	return n, &driver.Link{File: os.NewFile(uintptr(fd), "tap"), Framing: driver.FramingTap}
}

// do runs fn on a thread inside the namespace; sockets it opens stay there.
func (n *sandboxNetns) do(fn func() error) {
	n.t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		target, err := unix.Open(n.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(target)
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		err = fn()
		if unix.Setns(self, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		n.t.Fatalf("in %s: %v", n.path, err)
	}
}

// TestCraftedFramesFromNetns (D-1, D-2): the T1 setup — a real kernel in
// a sandbox network namespace on a tap, the real gateway on the other end,
// and crafted frames written with an AF_PACKET socket from inside the
// namespace, as a root-in-sandbox attacker would. The refused ones are
// counted and never dialled (a live upstream behind each); a connection the
// kernel itself opens is the control, and, the tap being read in order,
// proves every crafted frame before it was decided.
func TestCraftedFramesFromNetns(t *testing.T) {
	ns, link := newSandboxNetns(t)
	p, err := egress.ParsePolicy([]byte(`{"allow_internet": true}`))
	if err != nil {
		t.Fatal(err)
	}
	h := &rawHarness{dialer: &mapDialer{to: map[string]string{}}, counters: &Counters{}}
	hits := map[string]*atomic.Int64{}
	for _, d := range []string{allowedDst.String(), markerDst.String(), "[2606:4700::1111]:80"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		h.dialer.to[d] = ln.Addr().String()
		n := &atomic.Int64{}
		hits[d] = n
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
	gw, err := Attach(link, Config{Sandbox: "sb-netns", Execution: "ex-netns", Policy: egress.NewHolder(p),
		Upstream: fakeResolver{}, Dialer: h.dialer, Counters: h.counters})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })

	var sock int
	ns.do(func() error {
		ifi, err := net.InterfaceByName(sandboxnet.IfName)
		if err != nil {
			return err
		}
		if sock, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL))); err != nil {
			return err
		}
		return unix.Bind(sock, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})
	})
	t.Cleanup(func() { unix.Close(sock) })

	src := netip.AddrPortFrom(guestIP, guestPort)
	syn := tcpSYN(src, allowedDst, nil)
	v6src := netip.MustParseAddr("2001:db8:5::15")
	v6dst := netip.MustParseAddrPort("[2606:4700::1111]:80")
	frames := []struct {
		reason string
		frame  []byte
	}{
		{ReasonSpoofed, frameFromGuest(ipv4Packet{src: netip.MustParseAddr("10.0.2.99"), dst: allowedDst.Addr(), proto: 6, payload: tcpSYN(netip.AddrPortFrom(netip.MustParseAddr("10.0.2.99"), guestPort), allowedDst, nil)})},
		{ReasonSpoofed, ether(otherMAC, uint16(header.IPv4ProtocolNumber), ipv4Packet{src: guestIP, dst: allowedDst.Addr(), proto: 6, payload: syn}.bytes())},
		{ReasonIPOptions, frameFromGuest(ipv4Packet{src: guestIP, dst: allowedDst.Addr(), proto: 6, options: []byte{1, 1, 1, 0}, payload: syn})},
		{ReasonFragment, frameFromGuest(ipv4Packet{src: guestIP, dst: allowedDst.Addr(), proto: 6, id: 9, more: true, payload: syn[:16]})},
		{ReasonFragment, frameFromGuest(ipv4Packet{src: guestIP, dst: allowedDst.Addr(), proto: 6, id: 9, fragOff: 16, payload: syn[16:]})},
		{ReasonProtocol, frameFromGuest(ipv4Packet{src: guestIP, dst: allowedDst.Addr(), proto: protoGRE, payload: make([]byte, 24)})},
		{ReasonProtocol, frameFromGuest(ipv4Packet{src: guestIP, dst: allowedDst.Addr(), proto: protoSCTP, payload: make([]byte, 32)})},
		{ReasonEthertype, ether(sandboxnet.GuestMAC, 0x8100, append([]byte{0, 5, 8, 0}, ipv4Packet{src: guestIP, dst: allowedDst.Addr(), proto: 6, payload: syn}.bytes()...))},
		{ReasonIPv6, ether(sandboxnet.GuestMAC, uint16(header.IPv6ProtocolNumber), ipv6Packet(v6src, v6dst.Addr(), 6, tcpSYN(netip.AddrPortFrom(v6src, guestPort), v6dst, nil)))},
		{ReasonMartian, frameFromGuest(ipv4Packet{src: guestIP, dst: netip.MustParseAddr("127.0.0.1"), proto: 6, payload: tcpSYN(src, netip.MustParseAddrPort("127.0.0.1:80"), nil)})},
	}
	want := map[string]uint64{}
	for _, f := range frames {
		if err := unix.Sendto(sock, f.frame, 0, nil); err != nil {
			t.Fatalf("send a crafted frame (%s): %v", f.reason, err)
		}
		want[f.reason]++
	}
	// The control: the kernel's own connection, after the crafted frames.
	ns.do(func() error {
		d := net.Dialer{Timeout: 30 * time.Second}
		c, err := d.DialContext(context.Background(), "tcp", markerDst.String())
		if err != nil {
			return err
		}
		return c.Close()
	})
	snap := h.counters.Snapshot()
	for r, n := range want {
		// The kernel adds IPv6 of its own (MLD, router solicitations), so
		// at least.
		if snap[r] < n {
			t.Errorf("reason %s counted %d times, want at least %d: %v", r, snap[r], n, snap)
		}
	}
	for _, d := range []string{allowedDst.String(), v6dst.String()} {
		if h.dialer.dialled(d) || hits[d].Load() != 0 {
			t.Errorf("the gateway dialled %s for a crafted frame (upstream accepted %d)", d, hits[d].Load())
		}
	}
	if !h.dialer.dialled(markerDst.String()) {
		t.Error("the kernel's own connection was not dialled")
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
