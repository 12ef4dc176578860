// Package copyvol is the volume driver for filesystems without snapshots:
// templates are plain directories and a clone is "cp -a --reflink=auto" (a
// reflink, so still copy-on-write, on XFS and other reflink filesystems; a
// full copy on ext4). It is the slower fallback to volume/btrfs. Snapshots
// and clones of snapshots copy a tree a sandbox writes, so they walk it by
// file descriptor (copyAt), not with cp; templates are the node's own.
package copyvol

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/volume"
)

// Driver stores templates and volumes as directories under a root.
type Driver struct {
	layout volume.Layout
}

var _ volume.Driver = (*Driver)(nil)

// New prepares root (created if missing) and returns the driver.
func New(root string) (*Driver, error) {
	l := volume.Layout{Root: root}
	if err := l.Init(); err != nil {
		return nil, err
	}
	return &Driver{layout: l}, nil
}

// Name returns "copy".
func (d *Driver) Name() string { return "copy" }

// sealMarker is the hidden file that marks template name sealed; names never
// start with ".", so markers and templates cannot collide.
func (d *Driver) sealMarker(name string) string {
	return filepath.Join(d.layout.TemplatesDir(), ".sealed."+name)
}

// CreateTemplate makes templates/<name>.
func (d *Driver) CreateTemplate(ctx context.Context, name string) (string, error) {
	p, err := d.layout.Template(name)
	if err != nil {
		return "", err
	}
	if err := os.Mkdir(p, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("template %s: %w: already exists", name, errdefs.ErrConflict)
		}
		return "", fmt.Errorf("template %s: create: %w", name, err)
	}
	return p, nil
}

// SealTemplate writes the template's seal marker.
func (d *Driver) SealTemplate(ctx context.Context, name string) error {
	p, err := d.layout.Template(name)
	if err != nil {
		return err
	}
	if err := isDir(p); err != nil {
		return fmt.Errorf("template %s: %w", name, err)
	}
	if err := os.WriteFile(d.sealMarker(name), nil, 0o600); err != nil {
		return fmt.Errorf("template %s: seal: %w", name, err)
	}
	return nil
}

// DeleteTemplate unseals, then removes the template.
func (d *Driver) DeleteTemplate(ctx context.Context, name string) error {
	p, err := d.layout.Template(name)
	if err != nil {
		return err
	}
	if err := os.Remove(d.sealMarker(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("template %s: unseal: %w", name, err)
	}
	return removeTree(d.layout, p)
}

// Templates lists the sealed templates.
func (d *Driver) Templates(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(d.layout.TemplatesDir())
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			if _, err := os.Stat(d.sealMarker(e.Name())); err == nil {
				out = append(out, e.Name())
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// Clone copies a sealed template into volumes/<id>.
func (d *Driver) Clone(ctx context.Context, template, id string) (string, error) {
	src, err := d.layout.Template(template)
	if err != nil {
		return "", err
	}
	dst, err := d.layout.Volume(id)
	if err != nil {
		return "", err
	}
	if err := isDir(src); err != nil {
		return "", fmt.Errorf("template %s: %w", template, err)
	}
	if _, err := os.Stat(d.sealMarker(template)); err != nil {
		return "", fmt.Errorf("template %s: %w: not sealed", template, errdefs.ErrFailedPrecondition)
	}
	if _, err := os.Lstat(dst); err == nil {
		return "", fmt.Errorf("volume %s: %w: already exists", id, errdefs.ErrConflict)
	}
	tmp, err := os.MkdirTemp(d.layout.TmpDir(), id+"-")
	if err != nil {
		return "", fmt.Errorf("volume %s: %w", id, err)
	}
	// -a implies -P: symbolic links are copied as links, never followed.
	out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", "--", src+"/.", tmp+"/").CombinedOutput()
	if err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("volume %s: copy template %s: %w: %s", id, template, err, strings.TrimSpace(string(out)))
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE); err != nil {
		os.RemoveAll(tmp)
		if errors.Is(err, unix.EEXIST) {
			return "", fmt.Errorf("volume %s: %w: already exists", id, errdefs.ErrConflict)
		}
		return "", fmt.Errorf("volume %s: %w", id, err)
	}
	return dst, nil
}

// Delete removes volumes/<id>.
func (d *Driver) Delete(ctx context.Context, id string) error {
	p, err := d.layout.Volume(id)
	if err != nil {
		return err
	}
	return removeTree(d.layout, p)
}

// Usage reports the root filesystem's capacity.
func (d *Driver) Usage(ctx context.Context) (volume.Usage, error) {
	return volume.StatfsUsage(d.layout.Root)
}

// removeTree renames p into tmp/ (so it vanishes atomically) and removes it.
// os.RemoveAll never follows symbolic links.
func removeTree(l volume.Layout, p string) error {
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	tmp, err := os.MkdirTemp(l.TmpDir(), "delete-")
	if err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	gone := filepath.Join(tmp, "x")
	if err := os.Rename(p, gone); err != nil {
		os.Remove(tmp)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove %s: %w", p, err)
	}
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}

func isDir(p string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return errdefs.ErrNotFound
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", errdefs.ErrFailedPrecondition, p)
	}
	return nil
}

// Snapshot copies volumes/<id> into snapshots/<snap>. Read-only is by
// convention here: nothing but CloneSnapshot and DeleteSnapshot touches it.
func (d *Driver) Snapshot(ctx context.Context, id, snap string) (string, error) {
	src, err := d.layout.Volume(id)
	if err != nil {
		return "", err
	}
	dst, err := d.layout.Snapshot(snap)
	if err != nil {
		return "", err
	}
	if err := isDir(src); err != nil {
		return "", fmt.Errorf("volume %s: %w", id, err)
	}
	if err := d.copyTree(ctx, src, dst); err != nil {
		return "", fmt.Errorf("snapshot %s of volume %s: %w", snap, id, err)
	}
	return dst, nil
}

// CloneSnapshot copies snapshots/<snap> into volumes/<id>.
func (d *Driver) CloneSnapshot(ctx context.Context, snap, id string) (string, error) {
	src, err := d.layout.Snapshot(snap)
	if err != nil {
		return "", err
	}
	dst, err := d.layout.Volume(id)
	if err != nil {
		return "", err
	}
	if err := isDir(src); err != nil {
		return "", fmt.Errorf("snapshot %s: %w", snap, err)
	}
	if err := d.copyTree(ctx, src, dst); err != nil {
		return "", fmt.Errorf("volume %s from snapshot %s: %w", id, snap, err)
	}
	return dst, nil
}

// DeleteSnapshot removes snapshots/<snap>.
func (d *Driver) DeleteSnapshot(ctx context.Context, snap string) error {
	p, err := d.layout.Snapshot(snap)
	if err != nil {
		return err
	}
	return removeTree(d.layout, p)
}

// Snapshots lists snapshots/.
func (d *Driver) Snapshots(ctx context.Context) ([]string, error) { return d.layout.Snapshots() }

// Volumes lists volumes/.
func (d *Driver) Volumes(ctx context.Context) ([]string, error) { return d.layout.Volumes() }

// copyTree copies src into dst, which must not exist, through a temporary
// directory renamed into place (a crash leaves no half copy under dst).
func (d *Driver) copyTree(ctx context.Context, src, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("%w: %s already exists", errdefs.ErrConflict, filepath.Base(dst))
	}
	tmp, err := os.MkdirTemp(d.layout.TmpDir(), filepath.Base(dst)+"-")
	if err != nil {
		return err
	}
	// Not cp -a: src may be a volume its sandbox is writing, and cp
	// resolves paths (copyAt says why that matters).
	if err := copyAt(ctx, src, tmp); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("copy: %w", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE); err != nil {
		os.RemoveAll(tmp)
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%w: %s already exists", errdefs.ErrConflict, filepath.Base(dst))
		}
		return err
	}
	return nil
}
