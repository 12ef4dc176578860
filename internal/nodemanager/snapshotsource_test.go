package nodemanager

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/privop"
)

// TestResolveSnapshotSource: a template is made from a disk snapshot of
// either runtime, as the tree the builder reads: an ns snapshot's volume
// tree (dir:), a vm snapshot's disk image (ext4:, read in user space); a
// full snapshot and one not on this node are refused.
func TestResolveSnapshotSource(t *testing.T) {
	snaps := t.TempDir()
	srv := &Server{cfg: Config{
		Storage: &memStorage{}, SnapshotDir: snaps, ImageRuntimes: map[string]bool{"vm": true},
		SnapshotPath: func(id string) (string, error) { return "/volumes/snapshots/" + id, nil },
	}}
	for _, info := range []privop.SnapshotInfo{
		{ID: "sn-ns", Kind: privop.SnapshotDisk, Runtime: "ns", SandboxID: "sb", CreatedAt: time.Now()},
		{ID: "sn-vm", Kind: privop.SnapshotDisk, Runtime: "vm", SandboxID: "sb", CreatedAt: time.Now()},
		{ID: "sn-full", Kind: privop.SnapshotFull, Runtime: "vm", SandboxID: "sb", CreatedAt: time.Now()},
	} {
		dir := filepath.Join(snaps, info.ID)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := writeSnapshotInfo(dir, &info); err != nil {
			t.Fatal(err)
		}
	}
	for source, want := range map[string]string{
		"snapshot:sn-ns":  "dir:/volumes/snapshots/sn-ns",
		"snapshot:sn-vm":  "ext4:" + filepath.Join(snaps, "sn-vm", snapshotDiskImage),
		"builtin:minimal": "builtin:minimal",
	} {
		if got, err := srv.resolveSnapshotSource(source); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", source, got, err, want)
		}
	}
	if _, err := srv.resolveSnapshotSource("snapshot:sn-full"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a full snapshot: %v, want FailedPrecondition", err)
	}
	if _, err := srv.resolveSnapshotSource("snapshot:sn-elsewhere"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a snapshot not on this node: %v, want NotFound", err)
	}
	// An unprivileged caller cannot name a root-only image as ext4: itself.
	if err := checkSourceOwner(1000, "ext4:"+filepath.Join(snaps, "sn-vm", snapshotMeta)); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("ext4: of root's file from uid 1000: %v, want PermissionDenied", err)
	}
}
