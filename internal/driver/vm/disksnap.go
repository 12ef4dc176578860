package vm

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/vmimage"
)

var _ driver.DiskSnapshotter = (*Driver)(nil)

// SnapshotDisk writes a copy-on-write clone of the execution's root disk to
// dst while the VM runs. QEMU writes the raw image with plain writes, so once
// the guest has flushed (the caller freezes the guest filesystem first) the
// file holds a consistent filesystem; the reflink captures it in one step.
func (d *Driver) SnapshotDisk(ctx context.Context, execID, dst string) error {
	if err := driver.ValidHostPath("disk snapshot", dst); err != nil {
		return err
	}
	if _, err := d.loadState(execID); err != nil {
		return err
	}
	if err := vmimage.CloneImage(ctx, filepath.Join(d.execDir(execID), diskFile), dst); err != nil {
		return fmt.Errorf("vm: exec %s: disk snapshot: %w", execID, err)
	}
	return nil
}
