package treedelta

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/volume/btrfs"
)

// btrfsDir mounts a fresh btrfs loopback filesystem and unmounts it (detaching
// the loop device) when the test ends.
func btrfsDir(t *testing.T) string {
	t.Helper()
	testenv.RequiresBtrfs(t)
	dir := t.TempDir()
	l, err := btrfs.MountLoopback(context.Background(), filepath.Join(dir, "img"), filepath.Join(dir, "mnt"), 256<<20)
	if err != nil {
		t.Fatalf("MountLoopback: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Unmount(context.Background()); err != nil {
			t.Errorf("Unmount: %v", err)
		}
	})
	return l.Mountpoint
}
