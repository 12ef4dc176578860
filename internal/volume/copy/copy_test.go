package copyvol

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/testenv/swaprace"

	"github.com/spacesandbox/space/internal/volume"
	"github.com/spacesandbox/space/internal/volume/volumetest"
)

func TestConformance(t *testing.T) {
	volumetest.Run(t, func(t *testing.T) volume.Driver {
		d, err := New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

// newVolume returns a driver and the path of a volume "vol" cloned from an
// empty sealed template.
func newVolume(t *testing.T) (*Driver, string) {
	t.Helper()
	ctx := context.Background()
	d, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateTemplate(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	if err := d.SealTemplate(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	v, err := d.Clone(ctx, "base", "vol")
	if err != nil {
		t.Fatal(err)
	}
	return d, v
}

// TestSnapshotSwapRace snapshots a volume while a racer (its sandbox, in
// effect) swaps a directory of it with a symbolic link to a host directory:
// no snapshot ever holds the host file's content. cp -a, which resolves
// paths, copied it within a few rounds.
func TestSnapshotSwapRace(t *testing.T) {
	testenv.RequiresRoot(t)
	ctx := context.Background()
	host := filepath.Join(t.TempDir(), "host")
	if err := os.MkdirAll(host, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "secret"), []byte("host-secret-bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, v := newVolume(t)
	dir := filepath.Join(v, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mine"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := swaprace.Start(t, dir, host)
	taken := 0
	for round := range 200 {
		name := "snap-" + strconv.Itoa(round)
		snap, err := d.Snapshot(ctx, "vol", name)
		if err != nil {
			continue // a tree changing under the copy may be refused; a refused copy leaves nothing
		}
		taken++
		err = filepath.WalkDir(snap, func(p string, de fs.DirEntry, err error) error {
			if err != nil || !de.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(p)
			if err == nil && bytes.Contains(b, []byte("host-secret")) {
				return fmt.Errorf("round %d: %s holds a host file's content, copied through the swapped link", round, p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.DeleteSnapshot(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if r.Swaps() == 0 || taken == 0 {
		t.Fatalf("the racer swapped %d times and %d snapshots were taken: the race did not run", r.Swaps(), taken)
	}
	t.Logf("%d of 200 snapshots taken during %d swaps", taken, r.Swaps())
}

// TestSnapshotKeepsSparseFilesAndAttributes snapshots a volume holding a
// 1 TiB sparse file, a hard link pair, a setuid file and extended
// attributes: the copy is as sparse as the original (not a terabyte of
// zeros) and keeps the rest.
func TestSnapshotKeepsSparseFilesAndAttributes(t *testing.T) {
	testenv.RequiresRoot(t)
	ctx := context.Background()
	d, v := newVolume(t)
	big := filepath.Join(v, "sparse")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("middle"), 1<<39); err != nil {
		t.Skipf("skipping: this filesystem has no room for a sparse 1 TiB file: %v", err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Skipf("skipping: this filesystem has no room for a sparse 1 TiB file: %v", err)
	}
	f.Close()
	suid := filepath.Join(v, "suid")
	if err := os.WriteFile(suid, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(suid, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(suid, 0o4755); err != nil {
		t.Fatal(err)
	}
	xattrs := unix.Setxattr(suid, "user.space", []byte("kept"), 0) == nil
	if err := os.Link(suid, filepath.Join(v, "suid-link")); err != nil {
		t.Fatal(err)
	}
	snap, err := d.Snapshot(ctx, "vol", "snap")
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(snap, "sparse"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 1<<40 || st.Blocks*512 > 64<<20 {
		t.Errorf("snapshot of a 1 TiB sparse file: size %d, %d bytes allocated; want 1 TiB in at most 64 MiB", st.Size, st.Blocks*512)
	}
	g, err := os.Open(filepath.Join(snap, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := g.ReadAt(buf, 1<<39); err != nil || string(buf) != "middle" {
		t.Errorf("the data in the middle of the sparse file: %q, %v", buf, err)
	}
	g.Close()
	if err := unix.Stat(filepath.Join(snap, "suid"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o4755 || st.Uid != 1000 || st.Nlink != 2 {
		t.Errorf("snapshot of a setuid file owned by 1000 with two links: mode %o, uid %d, %d links", st.Mode&0o7777, st.Uid, st.Nlink)
	}
	if xattrs {
		b := make([]byte, 16)
		if n, err := unix.Getxattr(filepath.Join(snap, "suid"), "user.space", b); err != nil || string(b[:n]) != "kept" {
			t.Errorf("extended attribute user.space in the snapshot: %q, %v; want kept", b[:max(n, 0)], err)
		}
	}
}
