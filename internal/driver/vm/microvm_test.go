package vm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/driver/drivertest"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/guest"
	"github.com/spacesandbox/space/internal/vmimage"
)

// minimalKernel returns the minimal guest kernel from the shared test cache,
// waiting for a build that is under way (`make test` starts one in the
// background when the cache has none, and the other tests run meanwhile).
// The tests never start a build themselves: it takes 10 to 25 minutes on
// our 2-core hosts; build it once with
//
//	go run ./internal/vmimage/buildkernel -cache-dir /tmp/space-vm-test-cache
func (f *fixture) minimalKernel(t testing.TB) *vmimage.Kernel {
	t.Helper()
	k, err := vmimage.AwaitMinimalKernel(kernelWaitContext(t), f.cacheDir)
	if errors.Is(err, errdefs.ErrNotFound) {
		t.Skipf("skipping: %v; build it once with: go run ./internal/vmimage/buildkernel -cache-dir %s", err, f.cacheDir)
	}
	if err != nil {
		t.Fatalf("minimal guest kernel: %v", err)
	}
	return k
}

// kernelWaitContext bounds the wait for a kernel build: until five minutes
// before the test binary's deadline, for the test itself to run.
func kernelWaitContext(t testing.TB) context.Context {
	ctx := context.Background()
	if tt, ok := t.(*testing.T); ok {
		if dl, ok := tt.Deadline(); ok {
			c, cancel := context.WithDeadline(ctx, dl.Add(-5*time.Minute))
			t.Cleanup(cancel)
			return c
		}
	}
	c, cancel := context.WithTimeout(ctx, 30*time.Minute)
	t.Cleanup(cancel)
	return c
}

// microvmDriver returns a driver of the microvm machine that boots every VM.
func (f *fixture) microvmDriver(t *testing.T, stateDir string, k *vmimage.Kernel) *Driver {
	t.Helper()
	d, err := New(Config{StateDir: stateDir, Kernel: k, CacheDir: f.cacheDir, Log: testLogger(t), ColdBoot: true})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if d.Machine() != MachineMicrovm {
		t.Fatalf("a driver of the minimal kernel chose machine %q, want microvm", d.Machine())
	}
	return d
}

// TestMicrovm boots the minimal kernel on microvm and checks the guest on
// it: its own kernel with virtio-mmio devices, exec, files, the cgroup
// controllers the daemon uses, and a checkpoint restored with a running
// process's memory, on this driver and on one of the cloud kernel that then
// moves to the minimal kernel (UseKernel).
func TestMicrovm(t *testing.T) {
	f := newFixture(t)
	k := f.minimalKernel(t)
	stateDir := t.TempDir()
	d := f.microvmDriver(t, stateDir, k)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		for _, id := range []string{"mvm-1", "mvm-r"} {
			d.Cleanup(context.Background(), id)
		}
		d.Wait()
	})
	t0 := time.Now()
	inst, err := d.Start(ctx, driver.Spec{ExecID: "mvm-1", SandboxID: "sbx-mvm", RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: 256, CPUs: 2})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	c, took := connectGuest(t, ctx, inst, t0)
	t.Logf("microvm cold boot to Ready: %s (accel %s)", took.Round(time.Millisecond), d.accel)

	t.Run("OwnKernel", func(t *testing.T) {
		out := strings.Split(shell(t, c, "uname -r; cat /proc/cmdline; nproc; hostname"), "\n")
		if len(out) < 4 {
			t.Fatalf("output %q", out)
		}
		if out[0] != k.Release {
			t.Errorf("uname -r = %q, want the minimal kernel's %q", out[0], k.Release)
		}
		if !strings.Contains(out[1], "virtio_mmio.device=") || !strings.Contains(out[1], "qemu_fw_cfg.ioport=") {
			t.Errorf("kernel command line %q: want QEMU's virtio_mmio.device entries and the fw_cfg port", out[1])
		}
		if out[2] != "2" || out[3] != "sbx-mvm" {
			t.Errorf("nproc %q, hostname %q; want 2 CPUs and the hostname from fw_cfg", out[2], out[3])
		}
	})
	t.Run("KernelFeatures", func(t *testing.T) {
		out := shell(t, c, "grep -c . /proc/modules 2>/dev/null || echo none; mkdir -p /tmp/cg && mount -t cgroup2 none /tmp/cg && cat /tmp/cg/cgroup.controllers; umount /tmp/cg; ls /sys/class/virtio-ports/; ls /dev/hwrng")
		for _, want := range []string{"none", "cpu", "memory", "pids", "vport", "/dev/hwrng"} {
			if !strings.Contains(out, want) {
				t.Errorf("guest output %q lacks %q (no modules; cgroup2 cpu, memory, pids; virtio ports; the RNG)", out, want)
			}
		}
	})
	t.Run("NoNetwork", func(t *testing.T) {
		// Without Spec.Network the VM has no NIC: loopback only.
		if inst.Link != nil {
			t.Errorf("Instance.Link = %v for a VM started without a network", inst.Link)
		}
		if out := shell(t, c, "ls /sys/class/net"); strings.Join(strings.Fields(out), " ") != "lo" {
			t.Errorf("guest interfaces %q, want lo only", out)
		}
	})
	t.Run("Files", func(t *testing.T) {
		want := strings.Repeat("microvm file data\n", 5000)
		u := guest.BaseURL + "/files?path=" + url.QueryEscape("/tmp/written") + "&username=root"
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(want))
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := c.HTTPClient().Do(req)
		if err != nil {
			t.Fatalf("POST /files: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST /files: %s", resp.Status)
		}
		if out := shell(t, c, "wc -c < /tmp/written; sync"); strings.TrimSpace(out) != strconv.Itoa(len(want)) {
			t.Errorf("wc -c in the guest = %q, want %d", out, len(want))
		}
	})

	cpDir := filepath.Join(t.TempDir(), "cp")
	var saved int
	t.Run("Checkpoint", func(t *testing.T) {
		shell(t, c, "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.1; done' </dev/null >/dev/null 2>&1 &")
		for saved = 0; saved < 10; saved = counter(t, c) {
			time.Sleep(200 * time.Millisecond)
		}
		t0 := time.Now()
		if _, err := d.Checkpoint(ctx, "mvm-1", cpDir); err != nil {
			t.Fatalf("Checkpoint: %v", err)
		}
		t.Logf("microvm checkpoint of a 256 MiB guest: %s", time.Since(t0).Round(time.Millisecond))
		c.Close()
		gone(t, d, stateDir, inst)
	})
	if t.Failed() {
		return
	}
	t.Run("Restore", func(t *testing.T) {
		cp, err := driver.ReadCheckpoint(cpDir)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		inst, err := d.Restore(ctx, driver.Spec{ExecID: "mvm-r", SandboxID: "mvm-r"}, cp)
		if err != nil {
			t.Fatalf("Restore: %v", err)
		}
		c, took := connectGuest(t, ctx, inst, t0)
		t.Logf("microvm restore to Ready: %s", took.Round(time.Millisecond))
		if n := counter(t, c); n < saved {
			t.Errorf("counter after restore = %d; want it to continue from at least %d", n, saved)
		}
		if out := shell(t, c, "wc -c < /tmp/written"); strings.TrimSpace(out) != strconv.Itoa(len(strings.Repeat("microvm file data\n", 5000))) {
			t.Errorf("the file written before the checkpoint: wc -c = %q", out)
		}
		c.Close()
		gone(t, d, stateDir, inst)
	})
	t.Run("KernelSwitch", func(t *testing.T) {
		// A node starts on the cloud kernel (q35) and moves to the
		// minimal one when it is built (UseKernel): a checkpoint keeps
		// the machine and kernel it was saved with, new VMs boot the new
		// kernel.
		cp, err := driver.ReadCheckpoint(cpDir)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := New(Config{StateDir: t.TempDir(), Kernel: f.kernel, CacheDir: f.cacheDir, Log: testLogger(t), ColdBoot: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, id := range []string{"mvm-q35", "mvm-new"} {
				d2.Cleanup(context.Background(), id)
			}
			d2.Wait()
		})
		if d2.Machine() != MachineQ35 {
			t.Fatalf("a driver of the cloud kernel runs %q, want q35", d2.Machine())
		}
		inst, err := d2.Restore(ctx, driver.Spec{ExecID: "mvm-q35", SandboxID: "mvm-q35"}, cp)
		if err != nil {
			t.Fatalf("restore of a microvm checkpoint on a q35 driver: %v", err)
		}
		c, _ := connectGuest(t, ctx, inst, time.Now())
		if n := counter(t, c); n < saved {
			t.Errorf("counter after restore = %d; want it to continue from at least %d", n, saved)
		}
		if out := shell(t, c, "uname -r"); strings.TrimSpace(out) != k.Release {
			t.Errorf("the restored VM runs kernel %q, want its checkpoint's %q", out, k.Release)
		}
		c.Close()
		if err := d2.UseKernel(k); err != nil {
			t.Fatalf("UseKernel: %v", err)
		}
		if d2.Machine() != MachineMicrovm {
			t.Fatalf("after UseKernel(minimal) new VMs run %q, want microvm", d2.Machine())
		}
		inst, err = d2.Start(ctx, driver.Spec{ExecID: "mvm-new", SandboxID: "mvm-new", RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: 256, CPUs: 1})
		if err != nil {
			t.Fatalf("Start after UseKernel: %v", err)
		}
		c, _ = connectGuest(t, ctx, inst, time.Now())
		if out := shell(t, c, "uname -r; cat /proc/cmdline"); !strings.HasPrefix(out, k.Release+"\n") || !strings.Contains(out, "virtio_mmio.device=") {
			t.Errorf("a VM started after UseKernel(minimal): %q; want the minimal kernel on microvm", out)
		}
		c.Close()
	})
}

// TestConformanceMicrovm runs the runtime conformance suite on the microvm
// machine with the minimal kernel, every execution restored from a template
// snapshot, as TestConformance does on q35.
func TestConformanceMicrovm(t *testing.T) {
	f := newFixture(t)
	k := f.minimalKernel(t)
	cacheDir := t.TempDir()
	_ = os.Link(filepath.Join(f.cacheDir, "accel.json"), filepath.Join(cacheDir, "accel.json"))
	var d *Driver
	t0 := time.Now()
	t.Cleanup(func() {
		if d == nil {
			return
		}
		d.Wait()
		c := d.Counters()
		t.Logf("vm conformance on microvm: %s; %d template snapshots built, %d executions restored from them, %d cold boots, %d template failures",
			time.Since(t0).Round(time.Millisecond), c.TemplateBuilds, c.TemplateRestores, c.ColdBoots, c.TemplateFailures)
		if c.TemplateFailures != 0 || c.ColdBoots != 0 {
			t.Errorf("counters %+v: want every execution restored from a template snapshot", c)
		}
	})
	drivertest.Run(t, drivertest.Harness{
		New: func(t *testing.T) driver.Driver {
			var err error
			d, err = New(Config{StateDir: t.TempDir(), Kernel: k, CacheDir: cacheDir, Log: testLogger(t)})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			return d
		},
		RootFS:      func(*testing.T, string) string { return f.image },
		GuestBinary: f.guestBin,
	})
}

// machineKernels returns the kernel each machine boots: Debian's cloud
// kernel on q35, the minimal kernel on microvm.
func machineKernels(b *testing.B, f *fixture) []struct {
	machine string
	kernel  *vmimage.Kernel
} {
	return []struct {
		machine string
		kernel  *vmimage.Kernel
	}{{MachineQ35, f.kernel}, {MachineMicrovm, f.minimalKernel(b)}}
}

// startReady starts id on d and waits until its guest answers Ready.
func startReady(b *testing.B, d *Driver, f *fixture, id string) {
	ctx := context.Background()
	inst, err := d.Start(ctx, driver.Spec{ExecID: id, SandboxID: "bench", RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: 256})
	if err != nil {
		b.Fatal(err)
	}
	conn, err := fileConn(inst)
	if err != nil {
		b.Fatal(err)
	}
	c, err := guest.NewClient(conn)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.Wait(ctx); err != nil {
		b.Fatalf("exec %s: %v", id, err)
	}
}

// BenchmarkColdBoot measures Start plus the boot until the guest answers
// Ready, per machine (q35 with the cloud kernel, microvm with the minimal
// kernel). Run with -benchtime=5x: each iteration boots a VM.
func BenchmarkColdBoot(b *testing.B) {
	f := newFixture(b)
	for _, m := range machineKernels(b, f) {
		b.Run(m.machine, func(b *testing.B) {
			d, err := New(Config{StateDir: b.TempDir(), Kernel: m.kernel, Machine: m.machine, CacheDir: f.cacheDir,
				Log: slog.New(slog.NewTextHandler(io.Discard, nil)), ColdBoot: true})
			if err != nil {
				b.Fatal(err)
			}
			benchStarts(b, d, f)
			if c := d.Counters(); c.TemplateRestores != 0 {
				b.Errorf("counters %+v: want cold boots only", c)
			}
		})
	}
}

// BenchmarkTemplateRestore measures Start from a template snapshot (built
// before the timer starts) until the guest answers Ready, per machine. Run
// with -benchtime=10x.
func BenchmarkTemplateRestore(b *testing.B) {
	f := newFixture(b)
	for _, m := range machineKernels(b, f) {
		b.Run(m.machine, func(b *testing.B) {
			d, err := New(Config{StateDir: b.TempDir(), Kernel: m.kernel, Machine: m.machine, CacheDir: b.TempDir(),
				Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			startReady(b, d, f, "warm")
			if err := d.Cleanup(context.Background(), "warm"); err != nil {
				b.Fatal(err)
			}
			benchStarts(b, d, f)
			if c := d.Counters(); c.ColdBoots != 0 || c.TemplateBuilds != 1 {
				b.Errorf("counters %+v: want every Start restored from one build", c)
			}
		})
	}
}

// benchStarts times b.N Starts to Ready on d and reports p50 and p90.
func benchStarts(b *testing.B, d *Driver, f *fixture) {
	defer d.Wait()
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("bench-%d", i)
		t0 := time.Now()
		startReady(b, d, f, id)
		took = append(took, time.Since(t0))
		b.StopTimer()
		if err := d.Cleanup(context.Background(), id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportPercentiles(b, took)
}

// fileConn turns an Instance's channel into a connection, closing the file.
func fileConn(inst *driver.Instance) (net.Conn, error) {
	defer inst.Channel.Close()
	return net.FileConn(inst.Channel)
}
