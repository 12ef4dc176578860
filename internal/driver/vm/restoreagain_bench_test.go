package vm

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/guest"
)

// BenchmarkRestoreAgain restores one full snapshot again and again, as a
// template snapshot is for every new VM and a snapshot forked twice: a guest
// whose RAM is 40% random data in /dev/shm is checkpointed once, restored
// once (which verifies the checkpoint's files), and then each iteration
// restores it once more and waits until the guest answers. restore-ms is
// the driver's Restore (verify, clones, QEMU loading the state);
// restore-to-ready-ms adds the restored guest answering. Sizes as
// BenchmarkCheckpoint (SPACE_BENCH_CHECKPOINT_MIB, default 256,1024); run
// with TMPDIR on btrfs for RAM files (SPACE_BENCH_CHECKPOINT_STREAM=1 keeps
// RAM in the stream).
func BenchmarkRestoreAgain(b *testing.B) {
	f := newFixture(b)
	for _, mib := range checkpointSizes(b) {
		b.Run(strconv.Itoa(mib)+"MiB", func(b *testing.B) {
			d := checkpointDriver(b, f)
			defer d.Wait()
			ctx := context.Background()
			inst, err := d.Start(ctx, driver.Spec{ExecID: "ra-src", SandboxID: "bench", RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: mib})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Cleanup(ctx, "ra-src")
			ready := func(inst *driver.Instance) {
				b.Helper()
				conn, _ := net.FileConn(inst.Channel)
				inst.Channel.Close()
				c, err := guest.NewClient(conn)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				if err := c.Wait(wctx); err != nil {
					b.Fatal(err)
				}
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
			benchShell(b, c, "dd if=/dev/urandom of=/dev/shm/fill bs=1M count="+strconv.Itoa(mib*2/5)+" 2>&1")
			// The host stays connected through the save, as in
			// BenchmarkCheckpoint: a restored guest then ends that session
			// and opens its channel anew.
			cp, err := d.Checkpoint(ctx, "ra-src", filepath.Join(b.TempDir(), "cp"))
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
			d.Cleanup(ctx, "ra-src")
			time.Sleep(1100 * time.Millisecond) // the files settle (driver.VerifiedFiles)
			restore := func(id string) time.Duration {
				b.Helper()
				t0 := time.Now()
				rinst, err := d.Restore(ctx, driver.Spec{ExecID: id, SandboxID: "bench"}, cp)
				if err != nil {
					b.Fatal(err)
				}
				took := time.Since(t0)
				ready(rinst)
				return took
			}
			first := time.Now()
			restore("ra-first")
			firstReady := time.Since(first)
			d.Cleanup(ctx, "ra-first")
			b.ReportMetric(float64(firstReady.Milliseconds()), "first-restore-to-ready-ms")
			for i := 0; b.Loop(); i++ {
				id := "ra-" + strconv.Itoa(i)
				t0 := time.Now()
				took := restore(id)
				b.ReportMetric(float64(took.Milliseconds()), "restore-ms")
				b.ReportMetric(float64(time.Since(t0).Milliseconds()), "restore-to-ready-ms")
				b.Logf("%d MiB restore %d: Restore %s, to ready %s (first restore to ready %s)", mib, i, took.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond), firstReady.Round(time.Millisecond))
				d.Cleanup(ctx, id)
			}
		})
	}
}
