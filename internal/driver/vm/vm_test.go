package vm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/guest"
	"github.com/spacesandbox/space/internal/template"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/vmimage"
)

// fixture is what every VM test needs: the guest kernel, the real guest
// binary and the minimal template's root image.
type fixture struct {
	kernel   *vmimage.Kernel
	guestBin string
	image    string
	cacheDir string
}

// sharedCacheDir survives test runs (under os.TempDir): the kernel download,
// the initramfs and the accelerator probe are keyed by content or host boot.
func sharedCacheDir(t testing.TB) string {
	// make test points it at the cache the node-manager uses, where it has
	// built the minimal guest kernel once.
	dir := os.Getenv("SPACE_TEST_CACHE_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "space-vm-test-cache")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	testenv.RequiresRoot(t)
	testenv.RequiresTool(t, "qemu-system-x86_64", "mkfs.ext4", "apt-get", "apt-cache", "dpkg-deb", "cp")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := &fixture{cacheDir: sharedCacheDir(t)}
	k, err := vmimage.FetchKernel(ctx, f.cacheDir)
	if err != nil {
		t.Fatalf("fetch the guest kernel: %v", err)
	}
	f.kernel = k
	dir := t.TempDir()
	f.guestBin = filepath.Join(dir, "space-guest")
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "osusergo,netgo", "-o", f.guestBin, "../../../cmd/space-guest")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build space-guest: %v\n%s", err, out)
	}
	tpl := filepath.Join(dir, "template")
	if err := template.Minimal(ctx, tpl); err != nil {
		t.Fatalf("build the minimal template: %v", err)
	}
	f.image = filepath.Join(dir, "minimal.img")
	if err := (vmimage.RootImage{Dir: tpl, Dest: f.image, HeadroomBytes: 256 << 20}).Build(ctx); err != nil {
		t.Fatalf("build the root image: %v", err)
	}
	return f
}

// driver returns a driver that boots every VM (TestSnapshots covers
// template snapshots).
func (f *fixture) driver(t *testing.T, stateDir string) *Driver {
	t.Helper()
	d, err := New(Config{StateDir: stateDir, Kernel: f.kernel, CacheDir: f.cacheDir, Log: testLogger(t), ColdBoot: true})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// TestVM boots one VM and checks the driver contract and the guest on it;
// a TCG boot takes seconds, so the subtests share it.
func TestVM(t *testing.T) {
	f := newFixture(t)
	stateDir := t.TempDir()
	d := f.driver(t, stateDir)
	const execID = "vm-test-1"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		d.Cleanup(context.Background(), execID)
		d.Wait()
	})
	t0 := time.Now()
	inst, err := d.Start(ctx, driver.Spec{
		ExecID: execID, SandboxID: "sbx-vm", RootFS: f.image, GuestBinary: f.guestBin,
		MemoryMiB: 256, CPUs: 1, Env: map[string]string{"SPACE_TEST": "from-host"},
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	conn, err := net.FileConn(inst.Channel)
	inst.Channel.Close()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer c.Close()
	if err := c.Wait(ctx); err != nil {
		t.Fatalf("guest never answered Ready: %v\nconsole:\n%s", err, tailFile(filepath.Join(stateDir, "exec", execID, consoleLog), 4096))
	}
	t.Logf("guest ready %s after Start (accel %s)", time.Since(t0).Round(time.Millisecond), d.accel)

	t.Run("OwnKernel", func(t *testing.T) {
		out := shell(t, c, "uname -r")
		host, _ := os.ReadFile("/proc/sys/kernel/osrelease")
		if strings.TrimSpace(out) != f.kernel.Release || strings.TrimSpace(out) == strings.TrimSpace(string(host)) {
			t.Errorf("uname -r in the guest = %q; want the guest kernel %q, not the host's %q", out, f.kernel.Release, host)
		}
	})
	t.Run("HostInvisible", func(t *testing.T) {
		// Spec.Env is the daemon's own environment (as in the ns runtime);
		// processes get Init's variables, so read PID 1's.
		out := shell(t, c, "ls -d /proc/[0-9]* | wc -l; cat /proc/1/cmdline | tr '\\0' ' '; echo; hostname; tr '\\0' '\\n' < /proc/1/environ | sed -n 's/^SPACE_TEST=//p'")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 4 {
			t.Fatalf("output %q", out)
		}
		n, err := strconv.Atoi(strings.TrimSpace(lines[0]))
		if err != nil || n > 100 {
			t.Errorf("guest sees %q processes; want a handful (host processes are invisible)", lines[0])
		}
		if want := "/.space/space-guest --channel virtio:" + ChannelPort; strings.TrimSpace(lines[1]) != want {
			t.Errorf("guest PID 1 is %q, want %q", lines[1], want)
		}
		if lines[2] != "sbx-vm" || lines[3] != "from-host" {
			t.Errorf("hostname %q, SPACE_TEST %q; want sbx-vm, from-host", lines[2], lines[3])
		}
		out = shell(t, c, "cat /proc/mounts; ls -l /.space/space-guest")
		// The guest's own cgroup2 (its init mounts it for the workload
		// group) is the only cgroup mount there may be.
		own := strings.ReplaceAll(out, "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0", "")
		if strings.Contains(own, "cgroup") || !strings.Contains(out, "/dev/vda / ext4") || !strings.Contains(out, "-r-xr-xr-x") && !strings.Contains(out, "-rwxr-xr-x") {
			t.Errorf("guest mounts:\n%s\nwant the root disk on / and nothing of the host", out)
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
		want := bytes.Repeat([]byte("vm file data\n"), 10000)
		u := guest.BaseURL + "/files?path=" + url.QueryEscape("/tmp/written") + "&username=root"
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(want))
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := c.HTTPClient().Do(req)
		if err != nil {
			t.Fatalf("POST /files: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST /files: %s", resp.Status)
		}
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err = c.HTTPClient().Do(req)
		if err != nil {
			t.Fatalf("GET /files: %v", err)
		}
		got, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if !bytes.Equal(got, want) {
			t.Errorf("read back %d bytes, want the %d written", len(got), len(want))
		}
		if out := shell(t, c, "wc -c < /tmp/written"); strings.TrimSpace(out) != strconv.Itoa(len(want)) {
			t.Errorf("wc -c in the guest = %q", out)
		}
	})
	t.Run("Stats", func(t *testing.T) {
		s, err := d.Stats(ctx, execID)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		t.Logf("QEMU RSS %d MiB for a 256 MiB guest, CPU %s, %d threads", s.MemoryBytes>>20, time.Duration(s.CPUNanos), s.Pids)
		if s.MemoryBytes == 0 || s.CPUNanos == 0 || s.Pids == 0 || s.MemoryLimitBytes != 256<<20 {
			t.Errorf("Stats = %+v; want non-zero RSS, CPU and threads, limit 256 MiB", s)
		}
		// The disk is the image's: what it holds allocated of its size.
		t.Logf("disk image %d of %d MiB", s.DiskBytes>>20, s.DiskLimitBytes>>20)
		img, err := os.Stat(filepath.Join(d.execDir(execID), diskFile))
		if err != nil {
			t.Fatal(err)
		}
		if s.DiskBytes == 0 || s.DiskLimitBytes != uint64(img.Size()) || s.DiskBytes > s.DiskLimitBytes {
			t.Errorf("Stats disk %d of %d bytes; want the image's allocation of its size, %d", s.DiskBytes, s.DiskLimitBytes, img.Size())
		}
		if alive, err := d.Alive(ctx, execID); !alive || err != nil {
			t.Errorf("Alive = %v, %v; want true", alive, err)
		}
	})
	t.Run("PauseResume", func(t *testing.T) {
		if err := d.Pause(ctx, execID); err != nil {
			t.Fatalf("Pause: %v", err)
		}
		short, cancelShort := context.WithTimeout(ctx, 1500*time.Millisecond)
		_, err := c.Control().Ready(short, connect.NewRequest(&controlv1.ReadyRequest{}))
		cancelShort()
		if err == nil {
			t.Error("a paused guest answered Ready")
		}
		if err := d.Resume(ctx, execID); err != nil {
			t.Fatalf("Resume: %v", err)
		}
		if err := c.Wait(ctx); err != nil {
			t.Errorf("Ready after Resume: %v", err)
		}
	})
	t.Run("KillCleanupFromAnotherDriver", func(t *testing.T) {
		// A new Driver over the same state directory, as after a restart
		// of the node-manager, manages the VM the first one started.
		d2 := f.driver(t, stateDir)
		if err := d2.Kill(ctx, execID); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		select {
		case <-c.Done():
		case <-time.After(30 * time.Second):
			t.Error("the guest channel did not end after Kill")
		}
		if alive, err := d2.Alive(ctx, execID); alive || err != nil {
			t.Errorf("Alive after Kill = %v, %v; want false", alive, err)
		}
		if driver.ProcAlive(inst.Pid, inst.StartTime) {
			t.Errorf("QEMU pid %d still runs after Kill", inst.Pid)
		}
		if err := d2.Cleanup(ctx, execID); err != nil {
			t.Fatalf("Cleanup: %v", err)
		}
		if _, err := os.Stat(filepath.Join(stateDir, "exec", execID)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("state and disk left after Cleanup: %v", err)
		}
		if err := d2.Cleanup(ctx, execID); err != nil {
			t.Errorf("second Cleanup: %v", err)
		}
		if _, err := d2.Stats(ctx, execID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Stats after Cleanup = %v, want NotFound", err)
		}
		if err := d2.Kill(ctx, execID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Kill after Cleanup = %v, want NotFound", err)
		}
	})
}

// shell runs script with /bin/sh in the guest and returns its stdout.
func shell(t *testing.T, c *guest.Client, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := c.Process().Start(ctx, connect.NewRequest(&processv1.StartRequest{
		Process: &processv1.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}},
	}))
	if err != nil {
		t.Fatalf("start %q: %v", script, err)
	}
	var out strings.Builder
	var end *processv1.ProcessEvent_EndEvent
	for stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetStdout())
		if e := stream.Msg().GetEvent().GetEnd(); e != nil {
			end = e
		}
	}
	if end == nil {
		t.Fatalf("%q: no end event: %v", script, stream.Err())
	}
	if end.GetExitCode() != 0 {
		t.Errorf("%q exited %d: %s", script, end.GetExitCode(), out.String())
	}
	return out.String()
}

// BenchmarkColdBootToReady measures Start plus the guest's boot until it
// answers Ready (run with -benchtime=3x: each iteration boots a VM).
func BenchmarkColdBootToReady(b *testing.B) {
	f := newFixture(b)
	d, err := New(Config{StateDir: b.TempDir(), Kernel: f.kernel, CacheDir: f.cacheDir, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), ColdBoot: true})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		id := "bench-" + strconv.Itoa(i)
		inst, err := d.Start(ctx, driver.Spec{ExecID: id, SandboxID: "bench", RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: 256})
		if err != nil {
			b.Fatal(err)
		}
		conn, _ := net.FileConn(inst.Channel)
		inst.Channel.Close()
		c, err := guest.NewClient(conn)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		c.Close()
		if err := d.Cleanup(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	d.Wait()
}
