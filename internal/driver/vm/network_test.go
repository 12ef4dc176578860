package vm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/guest"
	"github.com/spacesandbox/space/internal/sandboxnet"
	"github.com/spacesandbox/space/internal/vmimage"
)

// TestNetwork boots a VM with a network on each machine and plays the
// node's gateway on its link: the guest configured its interface (it asks
// for the gateway's MAC with ARP), frames flow both ways (the guest's TCP
// SYN reaches the gateway's MAC after the ARP reply), the link can be
// reopened after the host end was lost, and a full snapshot restores with
// a working link.
func TestNetwork(t *testing.T) {
	f := newFixture(t)
	t.Run("microvm", func(t *testing.T) {
		k := f.minimalKernel(t)
		testNetwork(t, f, f.microvmDriver(t, t.TempDir(), k))
		t.Run("Template", func(t *testing.T) { testNetworkTemplate(t, f, k) })
	})
	t.Run("q35", func(t *testing.T) {
		testNetwork(t, f, f.driver(t, t.TempDir()))
		t.Run("Template", func(t *testing.T) { testNetworkTemplate(t, f, f.kernel) })
	})
}

// testNetworkTemplate starts a VM with a network from a template snapshot
// (built with a network by a scratch boot) and checks its link works.
func testNetworkTemplate(t *testing.T, f *fixture, k *vmimage.Kernel) {
	cacheDir := t.TempDir()
	_ = os.Link(filepath.Join(f.cacheDir, "accel.json"), filepath.Join(cacheDir, "accel.json"))
	d, err := New(Config{StateDir: t.TempDir(), Kernel: k, CacheDir: cacheDir, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const id = "net-tpl"
	t.Cleanup(func() {
		if err := d.Cleanup(context.Background(), id); err != nil {
			t.Errorf("Cleanup: %v", err)
		}
		d.Wait()
	})
	t0 := time.Now()
	inst, err := d.Start(ctx, driver.Spec{ExecID: id, SandboxID: "sbx-tpl", RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: 256, Network: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	gw := newTestGateway(t, inst.Link)
	c, took := connectGuest(t, ctx, inst, t0)
	if got := d.Counters(); got.TemplateBuilds != 1 || got.TemplateRestores != 1 || got.ColdBoots != 0 {
		t.Fatalf("Counters = %+v; want one template build and a restore from it", got)
	}
	t.Logf("template build and restore with a network: Ready after %s", took.Round(time.Millisecond))
	startConnect(t, c, 84)
	gw.await("a SYN to port 84 from the VM restored from its template", isSYNTo(84))
}

func testNetwork(t *testing.T, f *fixture, d *Driver) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const id, restoredID = "net-1", "net-r"
	t.Cleanup(func() {
		for _, id := range []string{id, restoredID} {
			if err := d.Cleanup(context.Background(), id); err != nil {
				t.Errorf("Cleanup %s: %v", id, err)
			}
		}
		d.Wait()
	})
	t0 := time.Now()
	inst, err := d.Start(ctx, driver.Spec{ExecID: id, SandboxID: "sbx-net", RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: 256, Network: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	gw := newTestGateway(t, inst.Link)
	c, took := connectGuest(t, ctx, inst, t0)
	t.Logf("%s with a network: Ready after %s", d.Machine(), took.Round(time.Millisecond))

	t.Run("GuestConfigured", func(t *testing.T) {
		out := shell(t, c, "cat /sys/class/net/eth0/address; ls /sys/class/net | tr '\\n' ' '; echo; ip -4 addr show eth0; ip route; cat /etc/resolv.conf; ls -l /etc/resolv.conf")
		for _, want := range []string{
			sandboxnet.GuestMAC.String() + "\n", "eth0 lo \n", "inet " + sandboxnet.GuestPrefix.String(),
			"default via " + sandboxnet.Gateway.String() + " dev eth0", string(sandboxnet.ResolvConf()), "-rw-r--r--",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("guest network state lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("FramesFlow", func(t *testing.T) {
		startConnect(t, c, 80)
		gw.await("the guest's ARP request for the gateway", isARPRequestForGateway)
		gw.answerARP()
		syn := gw.await("the guest's SYN to the gateway's MAC, port 80", isSYNTo(80))
		t.Logf("SYN of %d bytes after the ARP reply", len(syn))
	})
	t.Run("ReopenLink", func(t *testing.T) {
		gw.close()
		link, err := d.ReopenLink(ctx, id)
		if err != nil {
			t.Fatalf("ReopenLink after the host end was closed: %v", err)
		}
		gw = newTestGateway(t, link)
		startConnect(t, c, 81)
		gw.await("a SYN to port 81 on the reopened link", isSYNTo(81))

		// A second end while this one is open is refused, and leaves this
		// one working.
		if other, err := d.ReopenLink(ctx, id); !errors.Is(err, errdefs.ErrConflict) {
			other.Close()
			t.Errorf("ReopenLink while the link is open = %v, want Conflict", err)
		}
		startConnect(t, c, 82)
		gw.await("a SYN to port 82 after the refused reopen", isSYNTo(82))
	})
	t.Run("SnapshotRestore", func(t *testing.T) {
		cpDir := filepath.Join(t.TempDir(), "cp")
		cp, err := d.Checkpoint(ctx, id, cpDir)
		if err != nil {
			t.Fatalf("Checkpoint: %v", err)
		}
		if err := d.Kill(ctx, id); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		gw.close()
		c.Close()
		// The spec says no network; the checkpoint's VM has one, and wins.
		t1 := time.Now()
		rinst, err := d.Restore(ctx, driver.Spec{ExecID: restoredID, SandboxID: "sbx-net"}, cp)
		if err != nil {
			t.Fatalf("Restore: %v", err)
		}
		if rinst.Link == nil {
			rinst.Channel.Close()
			t.Fatal("the restored VM of a checkpoint with a network has no link")
		}
		rgw := newTestGateway(t, rinst.Link)
		rc, took := connectGuest(t, ctx, rinst, t1)
		t.Logf("restored with a network: Ready after %s", took.Round(time.Millisecond))
		startConnect(t, rc, 83)
		rgw.await("a SYN to port 83 from the restored guest", isSYNTo(83))
		if out := shell(t, rc, "cat /sys/class/net/eth0/address"); strings.TrimSpace(out) != sandboxnet.GuestMAC.String() {
			t.Errorf("restored guest's eth0 address %q, want %s", out, sandboxnet.GuestMAC)
		}
	})
}

// startConnect starts a TCP connection from the guest to the gateway's port
// in the background (busybox nc gives up after 20 s).
func startConnect(t *testing.T, c *guest.Client, port int) {
	t.Helper()
	shell(t, c, fmt.Sprintf("(busybox nc -w 20 %s %d </dev/null >/dev/null 2>&1 &)", sandboxnet.Gateway, port))
}

// testGateway is the test's end of a VM's link, in the node's gateway's
// place: it reads the guest's frames (each after its 4-byte big-endian
// length) and answers ARP for the gateway's address.
type testGateway struct {
	t    *testing.T
	conn net.Conn
	// lastARP is the last ARP request for the gateway seen.
	lastARP []byte
}

// maxTestFrame bounds a frame read from the link (an Ethernet frame of the
// link's MTU is 1514 bytes; virtio-net may hand over larger ones with
// offloads, never beyond 64 KiB).
const maxTestFrame = 65536

// awaitTimeout guards against a deadlock; frames come in seconds.
const awaitTimeout = 90 * time.Second

func newTestGateway(t *testing.T, link *driver.Link) *testGateway {
	t.Helper()
	if link == nil || link.File == nil {
		t.Fatal("no link: the VM was started with Spec.Network")
	}
	if link.Framing != driver.FramingStream {
		t.Fatalf("link framing %q, want %q", link.Framing, driver.FramingStream)
	}
	conn, err := net.FileConn(link.File)
	link.File.Close()
	if err != nil {
		t.Fatalf("link: %v", err)
	}
	g := &testGateway{t: t, conn: conn}
	t.Cleanup(g.close)
	return g
}

func (g *testGateway) close() { g.conn.Close() }

func (g *testGateway) readFrame(deadline time.Time) ([]byte, error) {
	g.conn.SetReadDeadline(deadline)
	var hdr [4]byte
	if _, err := io.ReadFull(g.conn, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > maxTestFrame {
		return nil, fmt.Errorf("frame length %d", n)
	}
	frame := make([]byte, n)
	if _, err := io.ReadFull(g.conn, frame); err != nil {
		return nil, err
	}
	return frame, nil
}

func (g *testGateway) writeFrame(frame []byte) {
	g.t.Helper()
	buf := binary.BigEndian.AppendUint32(nil, uint32(len(frame)))
	g.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := g.conn.Write(append(buf, frame...)); err != nil {
		g.t.Fatalf("write a frame to the link: %v", err)
	}
}

// await reads frames until match accepts one, which it returns; it answers
// the guest's ARP requests for the gateway on the way, except when it is
// waiting for one.
func (g *testGateway) await(what string, match func([]byte) bool) []byte {
	g.t.Helper()
	deadline := time.Now().Add(awaitTimeout)
	seen := 0
	for {
		frame, err := g.readFrame(deadline)
		if err != nil {
			g.t.Fatalf("waiting for %s (after %d other frames): %v", what, seen, err)
		}
		if match(frame) {
			return frame
		}
		seen++
		if isARPRequestForGateway(frame) {
			g.lastARP = frame
			g.answerARP()
		}
	}
}

// answerARP answers the guest's ARP request for the gateway's address.
func (g *testGateway) answerARP() {
	g.t.Helper()
	f := make([]byte, 0, 60)
	f = append(f, sandboxnet.GuestMAC...)
	f = append(f, sandboxnet.GatewayMAC...)
	f = append(f, 0x08, 0x06)               // ARP
	f = append(f, 0, 1, 8, 0, 6, 4, 0, 2)   // Ethernet, IPv4, reply
	f = append(f, sandboxnet.GatewayMAC...) // sender
	f = append(f, sandboxnet.Gateway.AsSlice()...)
	f = append(f, sandboxnet.GuestMAC...) // target
	f = append(f, sandboxnet.GuestPrefix.Addr().AsSlice()...)
	f = append(f, make([]byte, 60-len(f))...) // minimum frame
	g.writeFrame(f)
}

// isARPRequestForGateway reports whether frame is the guest's ARP request
// for the gateway's address, from its own address and MAC.
func isARPRequestForGateway(f []byte) bool {
	return len(f) >= 42 &&
		bytes.Equal(f[6:12], sandboxnet.GuestMAC) &&
		f[12] == 0x08 && f[13] == 0x06 &&
		binary.BigEndian.Uint16(f[20:22]) == 1 &&
		bytes.Equal(f[22:28], sandboxnet.GuestMAC) &&
		bytes.Equal(f[28:32], sandboxnet.GuestPrefix.Addr().AsSlice()) &&
		bytes.Equal(f[38:42], sandboxnet.Gateway.AsSlice())
}

// isSYNTo returns a matcher of the guest's TCP SYN to the gateway's port,
// sent to the gateway's MAC (which the guest learnt from an ARP reply).
func isSYNTo(port uint16) func([]byte) bool {
	return func(f []byte) bool {
		if len(f) < 34 || !bytes.Equal(f[0:6], sandboxnet.GatewayMAC) || !bytes.Equal(f[6:12], sandboxnet.GuestMAC) || f[12] != 0x08 || f[13] != 0x00 {
			return false
		}
		ip := f[14:]
		ihl := int(ip[0]&0x0f) * 4
		if ip[0]>>4 != 4 || ihl < 20 || len(ip) < ihl+14 || ip[9] != 6 {
			return false
		}
		if !bytes.Equal(ip[12:16], sandboxnet.GuestPrefix.Addr().AsSlice()) || !bytes.Equal(ip[16:20], sandboxnet.Gateway.AsSlice()) {
			return false
		}
		tcp := ip[ihl:]
		return binary.BigEndian.Uint16(tcp[2:4]) == port && tcp[13]&0x12 == 0x02
	}
}
