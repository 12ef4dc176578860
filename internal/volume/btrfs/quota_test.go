package btrfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/testenv"
)

const mib = 1 << 20

// loopbackOf is loopback with an image of size bytes.
func loopbackOf(t testing.TB, size int64) string {
	t.Helper()
	testenv.RequiresBtrfs(t)
	dir := t.TempDir()
	l, err := MountLoopback(context.Background(), filepath.Join(dir, "img"), filepath.Join(dir, "mnt"), size)
	if err != nil {
		t.Fatalf("MountLoopback: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Unmount(context.Background()); err != nil {
			t.Errorf("Unmount: %v", err)
		}
		if devs := loopDevices(context.Background(), l.Image); len(devs) > 0 {
			t.Errorf("loop devices left: %v", devs)
		}
	})
	return l.Mountpoint
}

// quotaDriver opens a driver with quotas on a fresh loopback and a sealed
// template "base" holding one file.
func quotaDriver(t *testing.T, size int64, cfg Config) *Driver {
	t.Helper()
	return quotaDriverOn(t, loopbackOf(t, size), cfg)
}

func quotaDriverOn(t *testing.T, mnt string, cfg Config) *Driver {
	t.Helper()
	d, err := NewWithConfig(filepath.Join(mnt, "store"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if mode, why := d.QuotaMode(); mode == "" {
		t.Fatalf("no quotas on a fresh btrfs: %s", why)
	}
	ctx := context.Background()
	tpl, err := d.CreateTemplate(ctx, "base")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(tpl, "base.bin"), 8*mib)
	if err := d.SealTemplate(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	return d
}

// limitedClone clones "base" into id and limits it to limit bytes.
func limitedClone(t *testing.T, d *Driver, id string, limit uint64) string {
	t.Helper()
	ctx := context.Background()
	p, err := d.Clone(ctx, "base", id)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Limit(ctx, id, limit); err != nil {
		t.Fatalf("Limit(%s): %v", id, err)
	}
	return p
}

func writeFile(t *testing.T, p string, n int) {
	t.Helper()
	if w, err := fill(p, int64(n)); err != nil {
		t.Fatalf("write %s: %d of %d bytes: %v", p, w, n, err)
	}
}

// fill writes up to n bytes of incompressible data to a new file p, syncing
// as it goes so that quota accounting sees every write, and returns what was
// written with the error that stopped it.
func fill(p string, n int64) (int64, error) {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, mib)
	var written int64
	for written < n {
		for i := range buf {
			buf[i] = byte(written>>12) ^ byte(i*7)
		}
		k, err := f.Write(buf[:min(int64(len(buf)), n-written)])
		written += int64(k)
		if err == nil && written%(8*mib) == 0 {
			err = f.Sync()
		}
		if err != nil {
			return written, err
		}
	}
	return written, f.Sync()
}

// isQuotaError reports whether err is what a full quota answers.
func isQuotaError(err error) bool {
	return errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.ENOSPC)
}

// TestQuotaFill: a volume written past its limit gets EDQUOT, having written
// no more than its limit; its neighbour still writes.
func TestQuotaFill(t *testing.T) {
	testQuotaFill(t, quotaDriver(t, 512*mib, Config{}))
}

// TestQuotaFillClassic: the same on a filesystem whose quotas are classic
// quota groups (kernels before simple quotas, or an operator's choice),
// which the driver keeps.
func TestQuotaFillClassic(t *testing.T) {
	mnt := loopbackOf(t, 512*mib)
	if err := run(context.Background(), "quota", "enable", mnt); err != nil {
		t.Fatal(err)
	}
	d := quotaDriverOn(t, mnt, Config{})
	if mode, _ := d.QuotaMode(); mode != quotaClassic {
		t.Fatalf("quota mode %q on a filesystem with classic quotas, want %q", mode, quotaClassic)
	}
	testQuotaFill(t, d)
}

func testQuotaFill(t *testing.T, d *Driver) {
	const limit = 32 * mib
	a := limitedClone(t, d, "a", limit)
	b := limitedClone(t, d, "b", limit)

	n, err := fill(filepath.Join(a, "fill"), 256*mib)
	if !isQuotaError(err) {
		t.Fatalf("filling a volume limited to %d MiB: wrote %d MiB, err %v; want EDQUOT", limit/mib, n/mib, err)
	}
	if n > limit {
		t.Errorf("the full volume wrote %d MiB, more than its %d MiB limit", n/mib, limit/mib)
	}
	// Deleting is always possible in a full volume, and frees its space.
	if err := os.Remove(filepath.Join(a, "fill")); err != nil {
		t.Fatalf("remove in a full volume: %v", err)
	}
	writeFile(t, filepath.Join(b, "neighbour"), 16*mib)
	syncFS(t, b)
	u, err := d.DiskUsage(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	if u.LimitBytes != limit || u.UsedBytes < 16*mib || u.UsedBytes > limit {
		t.Errorf("DiskUsage(b) = %+v, want 16 MiB..limit used of a %d limit", u, uint64(limit))
	}
}

// TestQuotaInodes: btrfs allocates inodes dynamically, so there is no inode
// table to exhaust; every inode's metadata is charged to the volume's quota
// group, so creating empty files stops at the limit too.
func TestQuotaInodes(t *testing.T) {
	d := quotaDriver(t, 512*mib, Config{})
	a := limitedClone(t, d, "a", 4*mib)
	b := limitedClone(t, d, "b", 4*mib)
	dir := filepath.Join(a, "many")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var err error
	n := 0
	for ; n < 1_000_000; n++ {
		var f *os.File
		if f, err = os.Create(filepath.Join(dir, fmt.Sprint(n))); err != nil {
			break
		}
		f.Close()
		if n%2000 == 0 {
			syncFS(t, dir)
		}
	}
	if !isQuotaError(err) {
		t.Fatalf("created %d empty files, last error %v; want EDQUOT before 1,000,000", n, err)
	}
	t.Logf("a 4 MiB quota holds %d empty files", n)
	writeFile(t, filepath.Join(b, "neighbour"), 2*mib)
}

// TestQuotaSnapshotAndFork: a full volume can still be snapshotted (stop,
// hibernate) and the snapshot cloned (start, rollback, fork); the clone is
// bounded by its own limit, and the original's snapshot stays charged to it.
func TestQuotaSnapshotAndFork(t *testing.T) {
	ctx := context.Background()
	d := quotaDriver(t, 512*mib, Config{})
	const limit = 32 * mib
	a := limitedClone(t, d, "a", limit)
	if _, err := fill(filepath.Join(a, "fill"), 256*mib); !isQuotaError(err) {
		t.Fatalf("fill: %v, want EDQUOT", err)
	}
	if _, err := d.Snapshot(ctx, "a", "snap"); err != nil {
		t.Fatalf("Snapshot of a full volume: %v", err)
	}
	fork, err := d.CloneSnapshot(ctx, "snap", "fork")
	if err != nil {
		t.Fatalf("CloneSnapshot of a full volume's snapshot: %v", err)
	}
	if err := d.Limit(ctx, "fork", limit); err != nil {
		t.Fatal(err)
	}
	n, err := fill(filepath.Join(fork, "more"), 256*mib)
	if !isQuotaError(err) || n > limit {
		t.Fatalf("the fork of a full volume wrote %d MiB (err %v); want EDQUOT within its %d MiB", n/mib, err, limit/mib)
	}
	// The snapshot holds a's data: a stays charged for it after deleting it.
	if err := os.Remove(filepath.Join(a, "fill")); err != nil {
		t.Fatal(err)
	}
	syncFS(t, a)
	if n, err := fill(filepath.Join(a, "again"), 256*mib); !isQuotaError(err) || n > 4*mib {
		t.Errorf("a volume whose snapshot holds its limit's worth wrote %d MiB more (err %v); want EDQUOT at once", n/mib, err)
	}
	// Deleting the snapshot gives the space back.
	if err := d.DeleteSnapshot(ctx, "snap"); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, "fork"); err != nil {
		t.Fatal(err)
	}
	syncSubvolumes(t, d)
	os.Remove(filepath.Join(a, "again"))
	writeFile(t, filepath.Join(a, "after"), 16*mib)
}

// syncSubvolumes waits for deleted subvolumes to be cleaned, so their space
// is uncharged.
func syncSubvolumes(t *testing.T, d *Driver) {
	t.Helper()
	if err := run(context.Background(), "subvolume", "sync", d.layout.Root); err != nil {
		t.Fatal(err)
	}
	syncFS(t, d.layout.Root)
}

// syncFS commits the filesystem holding p: quota groups are updated when a
// transaction commits.
func syncFS(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		t.Fatalf("syncfs %s: %v", p, err)
	}
}

// TestQuotaReserve: sandboxes whose own limits add up to more than the
// filesystem stop at the filesystem's free space less the reserve, and the
// node can still write its reserve's worth.
func TestQuotaReserve(t *testing.T) {
	const reserve = 128 * mib
	d := quotaDriver(t, 768*mib, Config{Reserve: reserve})
	var vols []string
	for i := range 3 {
		vols = append(vols, limitedClone(t, d, fmt.Sprint("v", i), 1<<30))
	}
	var total int64
	for i, v := range vols {
		n, err := fill(filepath.Join(v, "fill"), 1<<30)
		total += n
		if !isQuotaError(err) {
			t.Fatalf("volume %d wrote %d MiB, err %v; want EDQUOT from the sandboxes' group", i, n/mib, err)
		}
	}
	t.Logf("sandboxes wrote %d MiB in all", total/mib)
	// The node's own files (the store's root is outside the sandboxes'
	// group) still have the reserve.
	writeFile(t, filepath.Join(d.layout.TmpDir(), "upload"), reserve/2)
	if _, err := d.Clone(context.Background(), "base", "late"); err != nil {
		t.Errorf("Clone with sandboxes full: %v (a new volume holds nothing yet)", err)
	}
}
