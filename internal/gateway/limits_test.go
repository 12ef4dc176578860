package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/gateway/gatewaytest"
)

// holdUpstream is an upstream that keeps every connection open until its
// client closes it, counting the open ones.
type holdUpstream struct {
	addr string
	open atomic.Int64
}

func startHoldUpstream(t *testing.T) *holdUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u := &holdUpstream{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.open.Add(1)
			go func() {
				_, _ = io.Copy(io.Discard, c)
				c.Close()
				u.open.Add(-1)
			}()
		}
	}()
	return u
}

// eventually waits up to a minute (a bound for a busy machine, not a
// measure) for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFlowLimit (C-5): a sandbox holds at most MaxFlows connections open
// through its gateway. The next connection is refused with a RST before
// anything is dialled and counted (flow_limit); another sandbox of the node
// connects meanwhile; a connection that ends frees its slot.
func TestFlowLimit(t *testing.T) {
	h := startHarness(t, `{"allow_internet": true}`)
	up := startHoldUpstream(t)
	const dst = "20.0.0.13:80"
	h.dialer.mu.Lock()
	h.dialer.to[dst] = up.addr
	h.dialer.mu.Unlock()

	ctx := t.Context()
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for i := range MaxFlows {
		c, err := h.g.dial(ctx, netip.MustParseAddrPort(dst))
		if err != nil {
			t.Fatalf("flow %d of %d: %v", i+1, MaxFlows, err)
		}
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: 20.0.0.13\r\n\r\n")
		held = append(held, c)
	}
	eventually(t, "every flow to reach the upstream", func() bool { return up.open.Load() == MaxFlows })
	h.dialer.mu.Lock()
	dials := len(h.dialer.dials)
	h.dialer.mu.Unlock()

	before := h.counters.Snapshot()[ReasonFlowLimit]
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := h.g.dial(dctx, netip.MustParseAddrPort(dst))
	cancel()
	if err == nil {
		c.Close()
		t.Fatalf("connection %d was accepted; want a refusal past the %d-flow cap", MaxFlows+1, MaxFlows)
	}
	if got := h.counters.Snapshot()[ReasonFlowLimit] - before; got != 1 {
		t.Errorf("flow_limit counted %d times for one refused connection, want 1 (counters %v)", got, h.counters.Snapshot())
	}
	h.dialer.mu.Lock()
	after := len(h.dialer.dials)
	h.dialer.mu.Unlock()
	if after != dials {
		t.Errorf("the refused connection was dialled upstream (%d dials, was %d)", after, dials)
	}

	// Another sandbox on the same node is not affected.
	other := startHarness(t, `{"allow_internet": true}`)
	go func() {
		for range other.requests {
		}
	}()
	if _, err := other.get(t, "20.0.0.11:80", "20.0.0.11"); err != nil {
		t.Fatalf("another sandbox while the first holds %d flows: %v", MaxFlows, err)
	}

	// A flow that ends frees its slot.
	held[0].Close()
	eventually(t, "the closed flow to leave the upstream", func() bool { return up.open.Load() == MaxFlows-1 })
	eventually(t, "a new flow to be accepted in the freed slot", func() bool {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, err := h.g.dial(dctx, netip.MustParseAddrPort(dst))
		if err != nil {
			return false
		}
		held[0] = c
		return true
	})
}

// blockingDialer never completes a dial until the test ends: every
// connection request it gets stays pending in the gateway.
type blockingDialer struct {
	mu      sync.Mutex
	pending int
	release chan struct{}
}

func (d *blockingDialer) DialContext(_ context.Context, _, address string) (net.Conn, error) {
	d.mu.Lock()
	d.pending++
	d.mu.Unlock()
	<-d.release
	return nil, fmt.Errorf("connect %s: refused (test dialer)", address)
}

func (d *blockingDialer) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pending
}

// TestPendingSYNLimit (C-5): a SYN flood from a sandbox, to upstreams that
// never answer, holds at most maxPendingSYN connection requests (and
// goroutines, and dials) in the gateway; the SYNs past it are dropped and
// counted (pending_syn_limit).
func TestPendingSYNLimit(t *testing.T) {
	p, err := egress.ParsePolicy([]byte(`{"allow_internet": true}`))
	if err != nil {
		t.Fatal(err)
	}
	link, raw := gatewaytest.NewRawLink(t)
	d := &blockingDialer{release: make(chan struct{})}
	counters := &Counters{}
	gw, err := Attach(link, Config{
		Sandbox: "sb-flood", Execution: "ex-flood", Policy: egress.NewHolder(p),
		Upstream: fakeResolver{}, Dialer: d, Counters: counters,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(d.release); gw.Close() })
	h := &rawHarness{raw: raw, gw: gw, counters: counters}

	const flood = maxPendingSYN + 100
	dst := netip.MustParseAddrPort("20.0.0.14:80")
	var frames [][]byte
	for i := range flood {
		src := netip.AddrPortFrom(guestIP, uint16(20000+i))
		frames = append(frames, frameFromGuest(ipv4Packet{src: guestIP, dst: dst.Addr(), proto: uint8(header.TCPProtocolNumber), payload: tcpSYN(src, dst, nil)}))
	}
	h.send(t, frames...) // every SYN has been through the stack once this returns
	eventually(t, "the pending requests to reach the dialer", func() bool { return d.count() >= maxPendingSYN })
	runtime.Gosched()
	if got := d.count(); got != maxPendingSYN {
		t.Errorf("%d connection requests pending upstream for a flood of %d SYNs, want %d", got, flood, maxPendingSYN)
	}
	if got := counters.Snapshot()[ReasonPendingSYN]; got != flood-maxPendingSYN {
		t.Errorf("pending_syn_limit counted %d, want %d (counters %v)", got, flood-maxPendingSYN, counters.Snapshot())
	}
	// The gateway still answers (its own ICMP, its DNS socket's stack).
	h.sync(t)
}

// TestUDPSprayHoldsNoState (C-5): a sandbox spraying UDP at many
// destinations and ports gets every datagram refused and counted, and the
// gateway keeps no per-destination state for it: no endpoint is made in
// the stack, nothing is dialled, and the gateway's goroutines do not grow
// with the spray.
func TestUDPSprayHoldsNoState(t *testing.T) {
	h := startRawHarness(t, `{"allow_internet": true}`)
	h.sync(t)
	endpoints := h.gw.stack.Stats().TCP.CurrentEstablished.Value()
	goroutines := runtime.NumGoroutine()
	before := h.counters.Snapshot()[ReasonUDP]
	const spray = 5000
	var frames [][]byte
	for i := range spray {
		dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte{20, byte(i >> 8), byte(i), 1}), uint16(1000+i))
		src := netip.AddrPortFrom(guestIP, uint16(30000+i%1000))
		frames = append(frames, frameFromGuest(ipv4Packet{src: guestIP, dst: dst.Addr(), proto: uint8(header.UDPProtocolNumber), payload: udpDatagram(src, dst, []byte("spray"))}))
		if len(frames) == 500 {
			h.send(t, frames...)
			frames = frames[:0]
		}
	}
	h.send(t, frames...)
	if got := h.counters.Snapshot()[ReasonUDP] - before; got != spray {
		t.Errorf("udp refusals counted %d for %d datagrams", got, spray)
	}
	if n := len(h.gw.stack.RegisteredEndpoints()); n > 1 {
		t.Errorf("%d transport endpoints registered in the stack after the spray, want only the DNS socket", n)
	}
	if e := h.gw.stack.Stats().TCP.CurrentEstablished.Value(); e != endpoints {
		t.Errorf("established connections went from %d to %d", endpoints, e)
	}
	h.dialer.mu.Lock()
	dials := append([]string(nil), h.dialer.dials...)
	h.dialer.mu.Unlock()
	if len(dials) != 0 {
		t.Errorf("the gateway dialled %v for UDP", dials)
	}
	// Goroutines are shared with the test runtime; a spray that kept
	// state per destination would add thousands, not a handful.
	if g := runtime.NumGoroutine(); g > goroutines+50 {
		t.Errorf("goroutines went from %d to %d over a spray of %d datagrams", goroutines, g, spray)
	}
}
