package blockdelta

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/volume/btrfs"
)

// btrfsDir mounts a fresh btrfs loopback filesystem of size bytes and
// unmounts it (detaching the loop device) when the test ends.
func btrfsDir(tb testing.TB, size int64) string {
	tb.Helper()
	testenv.RequiresBtrfs(tb)
	dir := tb.TempDir()
	l, err := btrfs.MountLoopback(context.Background(), filepath.Join(dir, "img"), filepath.Join(dir, "mnt"), size)
	if err != nil {
		tb.Fatalf("MountLoopback: %v", err)
	}
	tb.Cleanup(func() {
		if err := l.Unmount(context.Background()); err != nil {
			tb.Errorf("Unmount: %v", err)
		}
	})
	return l.Mountpoint
}

// TestExtentMapSkipsSharedExtents shows the FIEMAP fast path: on btrfs a
// reflinked image with a few changed blocks is diffed by reading only those.
func TestExtentMapSkipsSharedExtents(t *testing.T) {
	dir := btrfsDir(t, 512<<20)
	const size, bs = 64 << 20, 64 << 10
	data := make([]byte, size)
	testRand(5).Read(data)
	base := newFile(t, filepath.Join(dir, "base"), size, map[int64][]byte{0: data})
	if err := base.Sync(); err != nil {
		t.Fatal(err)
	}
	image := cloneFile(t, base, filepath.Join(dir, "image"))
	changed := []int64{0, 17 * bs, 500 * bs, size - bs}
	for _, off := range changed {
		if _, err := image.WriteAt(bytes.Repeat([]byte{0xAB}, 100), off+10); err != nil {
			t.Fatal(err)
		}
	}
	fast, stream := roundTrip(t, base, image, Options{BaseID: testBaseID})
	if !fast.ExtentMap {
		t.Fatal("Diff did not use FIEMAP on btrfs")
	}
	if fast.DataRecords != int64(len(changed)) {
		t.Errorf("DataRecords = %d, want %d", fast.DataRecords, len(changed))
	}
	// btrfs rewrites at least a 4 KiB sector per write, so a 64 KiB block
	// stops being shared only where it was written.
	if want := int64(size/bs - len(changed)); fast.BlocksShared != want {
		t.Errorf("BlocksShared = %d, want %d", fast.BlocksShared, want)
	}
	if max := int64(2 * len(changed) * bs); fast.BytesRead > max {
		t.Errorf("BytesRead = %d with the fast path, want at most %d (the changed blocks of both files)", fast.BytesRead, max)
	}
	slow, slowStream := roundTrip(t, base, image, Options{BaseID: testBaseID, NoExtentMap: true})
	if slow.BytesRead != 2*size {
		t.Errorf("BytesRead = %d without the fast path, want %d", slow.BytesRead, 2*size)
	}
	if !bytes.Equal(stream, slowStream) {
		t.Error("the fast path and the byte comparison wrote different streams")
	}
	t.Logf("fast path: read %d bytes, %d blocks shared; byte comparison: read %d bytes", fast.BytesRead, fast.BlocksShared, slow.BytesRead)
}
