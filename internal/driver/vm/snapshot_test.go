package vm

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/guest"
)

// connect turns an Instance's channel into a guest client and waits until
// the guest answers; it returns the client and the time to the answer.
func connectGuest(t *testing.T, ctx context.Context, inst *driver.Instance, since time.Time) (*guest.Client, time.Duration) {
	t.Helper()
	conn, err := net.FileConn(inst.Channel)
	inst.Channel.Close()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Wait(ctx); err != nil {
		t.Fatalf("exec %s: guest never answered Ready: %v", inst.ExecID, err)
	}
	return c, time.Since(since)
}

// initGuest does what the host bridge does after every start: fresh
// entropy, the clock, the hostname and the environment.
func initGuest(t *testing.T, ctx context.Context, c *guest.Client, hostname string, env map[string]string) {
	t.Helper()
	entropy := make([]byte, 64)
	rand.Read(entropy)
	resp, err := c.Control().Init(ctx, connect.NewRequest(&controlv1.InitRequest{
		SandboxId: hostname, Hostname: hostname, EnvVars: env, Entropy: entropy, Now: timestamppb.Now(),
	}))
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	if !resp.Msg.GetHostnameSet() || !resp.Msg.GetClockSet() {
		t.Errorf("Init = %v; want hostname and clock set", resp.Msg)
	}
}

// counter reads the guest counter's value.
func counter(t *testing.T, c *guest.Client) int {
	t.Helper()
	out := strings.TrimSpace(shell(t, c, "cat /tmp/c"))
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("counter file holds %q", out)
	}
	return n
}

// gone checks that an execution left no QEMU and no files.
func gone(t *testing.T, d *Driver, stateDir string, inst *driver.Instance) {
	t.Helper()
	if err := d.Cleanup(context.Background(), inst.ExecID); err != nil {
		t.Fatalf("Cleanup %s: %v", inst.ExecID, err)
	}
	if driver.ProcAlive(inst.Pid, inst.StartTime) {
		t.Errorf("QEMU pid %d of %s still runs after Cleanup", inst.Pid, inst.ExecID)
	}
	if _, err := os.Lstat(filepath.Join(stateDir, "exec", inst.ExecID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("files of %s left after Cleanup: %v", inst.ExecID, err)
	}
}

// TestSnapshots covers template snapshots, Checkpoint and Restore on as few
// boots as possible: one scratch boot for the template snapshot; everything
// else is restored.
func TestSnapshots(t *testing.T) {
	f := newFixture(t)
	stateDir := t.TempDir()
	// A cache of its own, so the template snapshot is built here and
	// removed with the test; the initramfs and probe are cheap to redo.
	cacheDir := t.TempDir()
	_ = os.Link(filepath.Join(f.cacheDir, "accel.json"), filepath.Join(cacheDir, "accel.json"))
	d, err := New(Config{StateDir: stateDir, Kernel: f.kernel, CacheDir: cacheDir, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 7*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		for _, id := range []string{"snap-1", "snap-2", "snap-r1", "snap-r2", "snap-bad"} {
			d.Cleanup(context.Background(), id)
		}
		d.Wait()
	})
	spec := func(id string) driver.Spec {
		return driver.Spec{ExecID: id, SandboxID: id, RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: 256, CPUs: 1}
	}

	// The first Start builds the template snapshot and restores from it.
	t0 := time.Now()
	inst1, err := d.Start(ctx, spec("snap-1"))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	c1, first := connectGuest(t, ctx, inst1, t0)
	if got := d.Counters(); got.TemplateBuilds != 1 || got.TemplateRestores != 1 || got.ColdBoots != 0 || got.TemplateFailures != 0 {
		t.Fatalf("Counters after the first Start = %+v; want one template build and restore, no cold boot", got)
	}
	t.Logf("first Start (template build + restore) to Ready: %s", first.Round(time.Millisecond))
	initGuest(t, ctx, c1, "snap-one", map[string]string{"SPACE_TEST": "one"})
	if out := shell(t, c1, "hostname; echo $SPACE_TEST"); out != "snap-one\none\n" {
		t.Errorf("hostname and env after a template restore = %q; want snap-one, one (from Init)", out)
	}

	t.Run("TemplateStart", func(t *testing.T) {
		t0 := time.Now()
		inst, err := d.Start(ctx, spec("snap-2"))
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		c, took := connectGuest(t, ctx, inst, t0)
		if got := d.Counters(); got.TemplateBuilds != 1 || got.TemplateRestores != 2 || got.ColdBoots != 0 {
			t.Errorf("Counters = %+v; want the second Start restored from the same snapshot", got)
		}
		t.Logf("create from template snapshot to Ready: %s", took.Round(time.Millisecond))
		initGuest(t, ctx, c, "snap-two", nil)
		if out := shell(t, c, "hostname"); out != "snap-two\n" {
			t.Errorf("hostname = %q", out)
		}
		c.Close()
		gone(t, d, stateDir, inst)
	})

	cpDir := filepath.Join(t.TempDir(), "cp")
	var saved int
	t.Run("Checkpoint", func(t *testing.T) {
		shell(t, c1, "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.1; done' </dev/null >/dev/null 2>&1 &")
		for saved = 0; saved < 15; saved = counter(t, c1) {
			time.Sleep(200 * time.Millisecond)
		}
		// Linux reseeds its CRNG on its own once its seed is older than
		// a second while the kernel is under two minutes up, and every
		// minute after: a young guest's clones would differ even without
		// the reseed on restore this test checks. Checkpoint a guest past
		// that, so that only the reseed can tell the restores apart.
		waitUptime(t, c1, 2*time.Minute+10*time.Second)
		t0 := time.Now()
		cp, err := d.Checkpoint(ctx, "snap-1", cpDir)
		if err != nil {
			t.Fatalf("Checkpoint: %v", err)
		}
		took := time.Since(t0)
		mem := cp.File(cpMemory)
		t.Logf("checkpoint of a 256 MiB guest: %s, memory file %d MiB, files %+v", took.Round(time.Millisecond), mem.Size>>20, cp.Files)
		if cp.MemoryMiB != 256 || cp.CPUs != 1 || cp.Runtime != "vm" || mem == nil || cp.File(cpDisk) == nil {
			t.Errorf("checkpoint = %+v", cp)
		}
		read, err := driver.ReadCheckpoint(cpDir)
		if err != nil || len(read.Files) != len(cp.Files) || read.Files[0] != cp.Files[0] {
			t.Errorf("ReadCheckpoint = %+v, %v; want the returned manifest", read, err)
		}
		// Only the restored copies continue: the original stops here.
		if err := d.Kill(ctx, "snap-1"); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		gone(t, d, stateDir, inst1)
	})
	if t.Failed() {
		return
	}

	var rnd [2]string
	for i, id := range []string{"snap-r1", "snap-r2"} {
		t.Run("Restore"+strconv.Itoa(i+1), func(t *testing.T) {
			cp, err := driver.ReadCheckpoint(cpDir)
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			inst, err := d.Restore(ctx, driver.Spec{ExecID: id, SandboxID: id}, cp)
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			c, took := connectGuest(t, ctx, inst, t0)
			t.Logf("restore to Ready: %s", took.Round(time.Millisecond))
			if n := counter(t, c); n < saved {
				t.Errorf("counter after restore = %d; want it to continue from at least %d", n, saved)
			}
			initGuest(t, ctx, c, id, nil)
			// 20000 reads of 32 bytes: each is the next step of the
			// kernel's CRNG key chain, so two clones of one RNG state
			// share blocks even when other consumers (forks, Init) moved
			// them on by different amounts.
			rnd[i] = shell(t, c, "dd if=/dev/urandom bs=32 count="+strconv.Itoa(randomReads)+" 2>/dev/null | od -An -v -tx1 | tr -d ' '")
			if n := len(strings.Fields(rnd[i])); n != 2*randomReads {
				t.Errorf("%d random reads gave %d lines of 16 bytes, want %d", randomReads, n, 2*randomReads)
			}
			// The counter still runs.
			n := counter(t, c)
			time.Sleep(500 * time.Millisecond)
			if m := counter(t, c); m <= n {
				t.Errorf("counter stuck at %d after restore", m)
			}
			c.Close()
			gone(t, d, stateDir, inst)
		})
	}
	firstBlocks := map[string]bool{}
	for _, l := range strings.Fields(rnd[0]) {
		firstBlocks[l] = true
	}
	shared := 0
	for _, l := range strings.Fields(rnd[1]) {
		if firstBlocks[l] {
			shared++
		}
	}
	if shared > 0 {
		t.Errorf("two restores of one checkpoint read %d equal 16-byte blocks from /dev/urandom: their RNG was not reseeded", shared)
	}
	if got := d.Counters().Restores; got != 2 {
		t.Errorf("Counters().Restores = %d, want 2", got)
	}

	t.Run("CorruptRefused", func(t *testing.T) {
		cp, err := driver.ReadCheckpoint(cpDir)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(cpDir, cpMemory)
		fh, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		fh.ReadAt(b, 4096)
		b[0] ^= 0x40
		fh.WriteAt(b, 4096)
		fh.Close()
		_, err = d.Restore(ctx, driver.Spec{ExecID: "snap-bad", SandboxID: "snap-bad"}, cp)
		if err == nil || !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), path) {
			t.Fatalf("Restore of a corrupted checkpoint = %v; want FailedPrecondition naming %s", err, path)
		}
		if _, err := os.Lstat(filepath.Join(stateDir, "exec", "snap-bad")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the refused restore created its execution: %v", err)
		}
		t.Logf("refused: %v", err)
	})
}

// BenchmarkTemplateStartToReady measures Start from a template snapshot
// (built before the timer starts) until the guest answers Ready, with the
// bridge's Init. Run with -benchtime=10x.
func BenchmarkTemplateStartToReady(b *testing.B) {
	f := newFixture(b)
	d, err := New(Config{StateDir: b.TempDir(), Kernel: f.kernel, CacheDir: b.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Wait()
	ctx := context.Background()
	start := func(id string) {
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
		defer c.Close()
		if err := c.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		entropy := make([]byte, 64)
		rand.Read(entropy)
		if _, err := c.Control().Init(ctx, connect.NewRequest(&controlv1.InitRequest{Hostname: "bench", Entropy: entropy, Now: timestamppb.Now()})); err != nil {
			b.Fatal(err)
		}
	}
	start("warm")
	if err := d.Cleanup(ctx, "warm"); err != nil {
		b.Fatal(err)
	}
	var took []time.Duration
	for i := 0; b.Loop(); i++ {
		id := "bench-" + strconv.Itoa(i)
		t0 := time.Now()
		start(id)
		took = append(took, time.Since(t0))
		b.StopTimer()
		if err := d.Cleanup(ctx, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportPercentiles(b, took)
	if c := d.Counters(); c.ColdBoots != 0 || c.TemplateBuilds != 1 {
		b.Errorf("counters %+v: want every Start restored from one build", c)
	}
}

func reportPercentiles(b *testing.B, took []time.Duration) {
	slices.Sort(took)
	if len(took) == 0 {
		return
	}
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(took[len(took)*9/10].Milliseconds()), "p90-ms")
}

// BenchmarkCheckpoint measures Checkpoint and Restore-to-Ready of a guest
// whose memory is 40% filled with random data (in /dev/shm, which may hold half), for 256 MiB
// and 1 GiB guests (SPACE_BENCH_CHECKPOINT_MIB: other sizes, comma-separated).
// The state is under TMPDIR: on btrfs the guests' RAM is a file (memfile.go)
// unless SPACE_BENCH_CHECKPOINT_STREAM=1 keeps it in the stream. Run with
// -benchtime=1x.
func BenchmarkCheckpoint(b *testing.B) {
	f := newFixture(b)
	for _, mib := range checkpointSizes(b) {
		b.Run(strconv.Itoa(mib)+"MiB", func(b *testing.B) {
			d := checkpointDriver(b, f)
			defer d.Wait()
			ctx := context.Background()
			inst, err := d.Start(ctx, driver.Spec{ExecID: "cp-src", SandboxID: "bench", RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: mib})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Cleanup(ctx, "cp-src")
			conn, _ := net.FileConn(inst.Channel)
			inst.Channel.Close()
			c, err := guest.NewClient(conn)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if err := c.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			benchShell(b, c, "dd if=/dev/urandom of=/dev/shm/fill bs=1M count="+strconv.Itoa(mib*2/5)+" 2>&1")
			for i := 0; b.Loop(); i++ {
				dir := filepath.Join(b.TempDir(), "cp")
				t0 := time.Now()
				cp, err := d.Checkpoint(ctx, "cp-src", dir)
				if err != nil {
					b.Fatal(err)
				}
				saved := time.Since(t0)
				id := "cp-dst-" + strconv.Itoa(i)
				t1 := time.Now()
				rinst, err := d.Restore(ctx, driver.Spec{ExecID: id, SandboxID: "bench"}, cp)
				if err != nil {
					b.Fatal(err)
				}
				rconn, _ := net.FileConn(rinst.Channel)
				rinst.Channel.Close()
				rc, err := guest.NewClient(rconn)
				if err != nil {
					b.Fatal(err)
				}
				if err := rc.Wait(ctx); err != nil {
					b.Fatal(err)
				}
				restored := time.Since(t1)
				rc.Close()
				b.ReportMetric(float64(saved.Milliseconds()), "checkpoint-ms")
				b.ReportMetric(float64(cp.File(cpMemory).Size>>20), "memory-MiB")
				if ram := cp.File(cpRAM); ram != nil {
					b.ReportMetric(float64(ram.Size>>20), "ram-file-MiB")
				}
				b.ReportMetric(float64(restored.Milliseconds()), "restore-to-ready-ms")
				d.Cleanup(ctx, id)
				d.Resume(ctx, "cp-src")
			}
		})
	}
}

// benchShell runs script in the guest and fails b if it fails.
func benchShell(b *testing.B, c *guest.Client, script string) {
	b.Helper()
	stream, err := c.Process().Start(context.Background(), connect.NewRequest(&processv1.StartRequest{
		Process: &processv1.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}},
	}))
	if err != nil {
		b.Fatal(err)
	}
	for stream.Receive() {
		if e := stream.Msg().GetEvent().GetEnd(); e != nil && e.GetExitCode() != 0 {
			b.Fatalf("%q exited %d", script, e.GetExitCode())
		}
	}
}

// randomReads is how many 32-byte reads of /dev/urandom each restore of
// TestSnapshots makes.
const randomReads = 20000

// waitUptime waits until the guest behind c has been up for at least d.
func waitUptime(t *testing.T, c *guest.Client, d time.Duration) {
	t.Helper()
	for {
		f := strings.Fields(shell(t, c, "cat /proc/uptime"))
		if len(f) == 0 {
			t.Fatal("empty /proc/uptime")
		}
		up, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			t.Fatalf("/proc/uptime holds %q", f)
		}
		if time.Duration(up*float64(time.Second)) >= d {
			return
		}
		time.Sleep(time.Second)
	}
}

// checkpointSizes are the guest sizes (MiB) the checkpoint benchmarks run:
// 256 and 1024, or SPACE_BENCH_CHECKPOINT_MIB's comma-separated list.
func checkpointSizes(b *testing.B) []int {
	env := os.Getenv("SPACE_BENCH_CHECKPOINT_MIB")
	if env == "" {
		return []int{256, 1024}
	}
	var sizes []int
	for _, f := range strings.Split(env, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			b.Fatalf("SPACE_BENCH_CHECKPOINT_MIB=%q: %v", env, err)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// checkpointDriver is a driver for one checkpoint benchmark size, its state
// under a fresh TMPDIR directory, its log on stderr with -v; RAM files
// unless SPACE_BENCH_CHECKPOINT_STREAM=1 keeps RAM in the stream.
func checkpointDriver(b *testing.B, f *fixture) *Driver {
	b.Helper()
	var logw io.Writer = io.Discard
	if testing.Verbose() {
		logw = os.Stderr // the driver's log has each save's and restore's steps
	}
	d, err := New(Config{StateDir: b.TempDir(), Kernel: f.kernel, CacheDir: f.cacheDir, Log: slog.New(slog.NewTextHandler(logw, nil)), ColdBoot: true})
	if err != nil {
		b.Fatal(err)
	}
	d.noMemoryFile = os.Getenv("SPACE_BENCH_CHECKPOINT_STREAM") == "1"
	return d
}
