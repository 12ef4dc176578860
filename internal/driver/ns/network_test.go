package ns

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandboxnet"
	"github.com/spacesandbox/space/internal/testenv"
)

// TestNetworkLink: with Spec.Network the sandbox has eth0 with the sandbox
// addresses, its resolver is the gateway, and the frames it sends arrive on
// Instance.Link; without it, there is no link.
func TestNetworkLink(t *testing.T) {
	testenv.RequiresRoot(t)
	// One driver per sandbox: startSandbox's cleanup waits for every
	// execution its driver started.
	plain := startSandbox(t, newDriver(t, testConfig(t, t.TempDir())), spec(t, "nonet"))
	if plain.inst.Link != nil {
		t.Fatalf("a sandbox started without Network has a link")
	}

	sp := spec(t, "withnet")
	sp.Network = true
	s := startSandbox(t, newDriver(t, testConfig(t, t.TempDir())), sp)
	if s.inst.Link == nil || s.inst.Link.Framing != driver.FramingTap {
		t.Fatalf("link = %+v, want a tap", s.inst.Link)
	}
	t.Cleanup(func() { s.inst.Link.Close() })
	if out, code := s.run(t, "ip -4 addr show "+sandboxnet.IfName); code != 0 || !strings.Contains(out, sandboxnet.GuestPrefix.String()) {
		t.Errorf("ip addr: %q (exit %d), want %s", out, code, sandboxnet.GuestPrefix)
	}
	if out, code := s.run(t, "ip route"); code != 0 || !strings.Contains(out, "default via "+sandboxnet.Gateway.String()) {
		t.Errorf("ip route: %q (exit %d)", out, code)
	}
	if out, _ := s.run(t, "cat /etc/resolv.conf"); !strings.Contains(out, "nameserver "+sandboxnet.DNS.String()) {
		t.Errorf("resolv.conf: %q", out)
	}
	// Nobody answers on the link: the guest's ping only produces ARP
	// requests for the gateway, which the link must carry.
	s.run(t, "ping -c 1 -W 1 "+sandboxnet.Gateway.String()+" >/dev/null 2>&1 &")
	frames := make(chan []byte, 16)
	go func() {
		for {
			buf := make([]byte, 2048)
			n, err := s.inst.Link.File.Read(buf)
			if err != nil {
				close(frames)
				return
			}
			frames <- buf[:n]
		}
	}()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				t.Fatal("link closed before an ARP request arrived")
			}
			// Ethernet: dst(6) src(6) type(2); ARP target IP at 14+24.
			if len(f) >= 42 && bytes.Equal(f[6:12], sandboxnet.GuestMAC) && f[12] == 0x08 && f[13] == 0x06 &&
				bytes.Equal(f[38:42], sandboxnet.Gateway.AsSlice()) {
				return
			}
		case <-deadline:
			t.Fatal("no ARP request for the gateway from the guest within 30s")
		}
	}
}

// TestReopenLink: after the link's holder went away (the tap with it), a new
// link is made and configured from outside; while one is held, a second is
// refused.
func TestReopenLink(t *testing.T) {
	testenv.RequiresRoot(t)
	d := newDriver(t, testConfig(t, t.TempDir()))
	sp := spec(t, "reopen")
	sp.Network = true
	s := startSandbox(t, d, sp)
	ctx := context.Background()
	if _, err := d.ReopenLink(ctx, sp.ExecID); !errdefs.IsConflict(err) {
		t.Fatalf("ReopenLink while the link is held = %v, want a conflict", err)
	}
	s.inst.Link.Close()
	var link *driver.Link
	var err error
	// The tap goes away with its last holder, asynchronously.
	for i := 0; i < 50; i++ {
		if link, err = d.ReopenLink(ctx, sp.ExecID); !errdefs.IsConflict(err) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("ReopenLink: %v", err)
	}
	defer link.Close()
	if out, code := s.run(t, "ip -4 addr show "+sandboxnet.IfName+"; ip route"); code != 0 || !strings.Contains(out, sandboxnet.GuestPrefix.String()) || !strings.Contains(out, "default via") {
		t.Fatalf("after ReopenLink: %q (exit %d)", out, code)
	}
	s.run(t, "ping -c 1 -W 1 "+sandboxnet.Gateway.String()+" >/dev/null 2>&1 &")
	buf := make([]byte, 2048)
	deadline := time.Now().Add(30 * time.Second)
	link.File.SetReadDeadline(deadline)
	for {
		n, err := link.File.Read(buf)
		if err != nil {
			t.Fatalf("no frame from the guest on the reopened link: %v", err)
		}
		if n >= 14 && bytes.Equal(buf[6:12], sandboxnet.GuestMAC) {
			return
		}
	}
}
