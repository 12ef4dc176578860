package vm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/vmimage"
)

// TestQEMUArgsNetwork: a VM with a network gets the stream netdev and the
// machine's NIC with the guest's MAC (on microvm on its own virtio-mmio
// transport, named to the kernel); one without gets neither.
func TestQEMUArgsNetwork(t *testing.T) {
	for _, tc := range []struct {
		machine, nic, transport string
	}{
		{MachineQ35, "virtio-net-pci,netdev=net0,id=nic0,mac=52:54:00:12:34:56,romfile=", ""},
		{MachineMicrovm, "virtio-net-device,netdev=net0,id=nic0,mac=52:54:00:12:34:56,bus=virtio-mmio-bus.4", "virtio_mmio.device=512@0xfeb00800:9"},
	} {
		t.Run(tc.machine, func(t *testing.T) {
			st := &state{ExecID: "e1", MemoryMiB: 256, CPUs: 1, Accel: AccelTCG, Kernel: "/k", Initrd: "/i", Machine: tc.machine}
			without := qemuArgs(st)
			if nd := argsAfter(without, "-netdev"); len(nd) != 0 || strings.Contains(strings.Join(without, " "), "virtio-net") {
				t.Errorf("a VM without a network has netdevs %q or a NIC: %s", nd, strings.Join(without, " "))
			}
			st.Network = true
			with := qemuArgs(st)
			if nd := argsAfter(with, "-netdev"); !slices.Equal(nd, []string{"stream,id=net0,server=on,addr.type=unix,addr.path=" + netSock}) {
				t.Errorf("-netdev %q, want the stream server on %s", nd, netSock)
			}
			if devs := argsAfter(with, "-device"); !slices.Contains(devs, tc.nic) {
				t.Errorf("devices %q lack the NIC %q", devs, tc.nic)
			}
			kernelArgs, _, _ := strings.Cut(argsAfter(with, "-append")[0], " -- ")
			kernelArgsWithout, _, _ := strings.Cut(argsAfter(without, "-append")[0], " -- ")
			if tc.transport != "" {
				if !slices.Contains(strings.Fields(kernelArgs), tc.transport) {
					t.Errorf("kernel arguments %q do not name the NIC's transport %q", kernelArgs, tc.transport)
				}
				// Interrupt 8 is microvm's RTC.
				if strings.Contains(kernelArgs, ":8") {
					t.Errorf("kernel arguments %q put a device on interrupt 8", kernelArgs)
				}
			}
			if tc.transport == "" && kernelArgs != kernelArgsWithout {
				t.Errorf("q35 kernel arguments change with the network: %q vs %q", kernelArgs, kernelArgsWithout)
			}
			// Everything else (but the kernel arguments) stays as it was:
			// template snapshots and checkpoints of VMs without a network
			// keep their devices.
			i := slices.Index(without, "-append") + 1
			with[i] = without[i]
			if !slices.Equal(with[:len(without)], without) {
				t.Errorf("the network changed other arguments:\n%q\n%q", without, with[:len(without)])
			}
		})
	}
}

// TestPreBindNetdev: the jail binds the stream netdev's socket and passes
// it as a descriptor; every other network backend is refused.
func TestPreBindNetdev(t *testing.T) {
	st := &state{ExecID: "x", MemoryMiB: 256, CPUs: 1, Accel: AccelTCG, Kernel: "/k/bzImage", Initrd: "/k/initrd", Machine: MachineMicrovm, Network: true}
	fds := map[string]int{}
	args, err := preBindSockets(qemuArgs(st), func(name string) (int, error) {
		fds[name] = 20 + len(fds)
		return fds[name], nil
	})
	if err != nil {
		t.Fatalf("preBindSockets(qemuArgs with a network): %v", err)
	}
	fd, ok := fds[netSock]
	if !ok || len(fds) != 4 {
		t.Fatalf("bound %v, want the netdev's socket among the four", fds)
	}
	want := "stream,id=net0,server=on,addr.type=fd,addr.str=" + strconv.Itoa(fd)
	if nd := argsAfter(args, "-netdev"); !slices.Equal(nd, []string{want}) {
		t.Errorf("-netdev %q, want %q", nd, want)
	}
	if joined := strings.Join(args, " "); strings.Contains(joined, "addr.path") || strings.Contains(joined, "addr.type=unix") {
		t.Errorf("rewritten arguments still name a socket path: %s", joined)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string // the rewritten -netdev value; "" for an error
	}{
		{"unix server", []string{"-netdev", "stream,id=n,server=on,addr.type=unix,addr.path=n.sock"}, "stream,id=n,server=on,addr.type=fd,addr.str=7"},
		{"path before type", []string{"-netdev", "stream,id=n,addr.path=n.sock,addr.type=unix,server=on"}, "stream,id=n,addr.str=7,addr.type=fd,server=on"},
		{"legacy server flag", []string{"-netdev", "stream,id=n,server,addr.type=unix,addr.path=n.sock"}, "stream,id=n,server,addr.type=fd,addr.str=7"},
		{"already a descriptor", []string{"-netdev", "stream,id=n,server=on,addr.type=fd,addr.str=5"}, "stream,id=n,server=on,addr.type=fd,addr.str=5"},
		{"client", []string{"-netdev", "stream,id=n,server=off,addr.type=unix,addr.path=n.sock"}, ""},
		{"no server option", []string{"-netdev", "stream,id=n,addr.type=unix,addr.path=n.sock"}, ""},
		{"absolute path", []string{"-netdev", "stream,id=n,server=on,addr.type=unix,addr.path=/run/n.sock"}, ""},
		{"dot-dot", []string{"-netdev", "stream,id=n,server=on,addr.type=unix,addr.path=.."}, ""},
		{"abstract", []string{"-netdev", "stream,id=n,server=on,addr.type=unix,addr.path=n,addr.abstract=on"}, ""},
		{"inet", []string{"-netdev", "stream,id=n,server=on,addr.type=inet,addr.host=0.0.0.0,addr.port=1234"}, ""},
		{"no address", []string{"-netdev", "stream,id=n,server=on"}, ""},
		{"path and str", []string{"-netdev", "stream,id=n,server=on,addr.type=unix,addr.path=n.sock,addr.str=3"}, ""},
		{"fd by name", []string{"-netdev", "stream,id=n,server=on,addr.type=fd,addr.str=monfd"}, ""},
		{"fd with path", []string{"-netdev", "stream,id=n,server=on,addr.type=fd,addr.str=3,addr.path=n.sock"}, ""},
		{"listen fails", []string{"-netdev", "stream,id=n,server=on,addr.type=unix,addr.path=fail.sock"}, ""},
		{"user", []string{"-netdev", "user,id=n"}, ""},
		{"tap", []string{"-netdev", "tap,id=n,ifname=tap0"}, ""},
		{"socket", []string{"-netdev", "socket,id=n,listen=:1234"}, ""},
		{"dgram", []string{"-netdev", "dgram,id=n,local.type=unix,local.path=d.sock"}, ""},
		{"type= form", []string{"-netdev", "type=stream,id=n,server=on,addr.type=unix,addr.path=n.sock"}, ""},
		{"-nic", []string{"-nic", "user"}, ""},
		{"-net", []string{"-net", "nic"}, ""},
		{"dangling -netdev", []string{"-netdev"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := preBindSockets(tc.args, func(name string) (int, error) {
				if name == "fail.sock" {
					return 0, errors.New("bind refused")
				}
				return 7, nil
			})
			if tc.want == "" {
				if err == nil {
					t.Errorf("preBindSockets(%q) = %q, want an error", tc.args, got)
				}
				return
			}
			if err != nil || !slices.Equal(got, []string{"-netdev", tc.want}) {
				t.Errorf("preBindSockets(%q) = %q, %v; want -netdev %q", tc.args, got, err, tc.want)
			}
		})
	}
}

// TestTemplateKeyHasNetwork: VMs with and without a network never share a
// template snapshot, and keys without one stay what they were.
func TestTemplateKeyHasNetwork(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(img, []byte("image"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Config{StateDir: t.TempDir(), Kernel: &vmimage.Kernel{Vmlinuz: "/k", SHA256: "k", Minimal: true}, QEMU: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	spec := driver.Spec{ExecID: "e", SandboxID: "s", RootFS: img, GuestBinary: "/bin/true"}
	without, err := d.templateKey(spec, fi, bootFiles{d.current(), "/c/initrd.cpio"}, AccelTCG, 256, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	spec.Network = true
	with, err := d.templateKey(spec, fi, bootFiles{d.current(), "/c/initrd.cpio"}, AccelTCG, 256, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if with == without {
		t.Errorf("template keys with and without a network are both %s", with)
	}
}

func TestNetdevConnected(t *testing.T) {
	msgs := func(lines ...string) []*qmpMessage {
		var out []*qmpMessage
		for _, l := range lines {
			m, err := parseQMPLine([]byte(l))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
		return out
	}
	for _, tc := range []struct {
		events []*qmpMessage
		want   bool
	}{
		{nil, false},
		{msgs(`{"event":"NETDEV_STREAM_DISCONNECTED","data":{"netdev-id":"net0"}}`), false},
		{msgs(`{"event":"NETDEV_STREAM_CONNECTED","data":{"netdev-id":"other","addr":{"type":"unix"}}}`), false},
		{msgs(`{"event":"NETDEV_STREAM_CONNECTED","data":"junk"}`), false},
		{msgs(`{"event":"VSERPORT_CHANGE","data":{"id":"net0","open":true}}`), false},
		{msgs(`{"event":"NETDEV_STREAM_DISCONNECTED","data":{"netdev-id":"net0"}}`,
			`{"event":"NETDEV_STREAM_CONNECTED","data":{"netdev-id":"net0","addr":{"path":"/x/net.sock","type":"unix"}}}`), true},
	} {
		if got := netdevConnected(tc.events, netdevID); got != tc.want {
			t.Errorf("netdevConnected(%d events) = %v, want %v", len(tc.events), got, tc.want)
		}
	}
}

// TestReopenLinkRefuses: ReopenLink needs a running execution with a
// network.
func TestReopenLinkRefuses(t *testing.T) {
	d, err := New(Config{StateDir: t.TempDir(), Kernel: &vmimage.Kernel{Vmlinuz: "/k"}, QEMU: "/bin/true", Unconfined: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := d.ReopenLink(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("ReopenLink of an unknown execution = %v, want NotFound", err)
	}
	if _, err := d.ReopenLink(ctx, "../x"); err == nil {
		t.Error("ReopenLink of an invalid id succeeded")
	}
	for _, network := range []bool{false, true} {
		if err := os.MkdirAll(d.execDir("e1"), 0o700); err != nil {
			t.Fatal(err)
		}
		// A pid that is not running: the state of a VM that exited.
		if err := d.saveState(&state{ExecID: "e1", Pid: 1 << 30, StartTime: 1, Network: network}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.ReopenLink(ctx, "e1"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("ReopenLink of a stopped execution (network %v) = %v, want FailedPrecondition", network, err)
		}
	}
}

// FuzzNetdevConnected: QMP events come from QEMU, which a guest may have
// compromised; any line is handled without a panic.
func FuzzNetdevConnected(f *testing.F) {
	f.Add([]byte(`{"event":"NETDEV_STREAM_CONNECTED","data":{"netdev-id":"net0","addr":{"type":"unix"}}}`))
	f.Add([]byte(`{"event":"NETDEV_STREAM_CONNECTED","data":[1,2]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseQMPLine(b)
		if err != nil {
			return
		}
		if netdevConnected([]*qmpMessage{m}, netdevID) && m.Event != "NETDEV_STREAM_CONNECTED" {
			t.Fatalf("event %q counted as a connection", m.Event)
		}
	})
}
