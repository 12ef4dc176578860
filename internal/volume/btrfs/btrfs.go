// Package btrfs is the volume driver for btrfs: a template is a subvolume,
// sealed by making it read-only, and a clone is a writable snapshot of it, made
// in constant time whatever the template's size. It drives the btrfs-progs
// command line (btrfs(8)), which is installed wherever btrfs is used.
package btrfs

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
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/volume"
)

// Driver stores templates and volumes as subvolumes under a root on btrfs.
type Driver struct {
	layout volume.Layout
	quota  *quota
}

var (
	_ volume.Driver   = (*Driver)(nil)
	_ volume.Limiter  = (*Driver)(nil)
	_ volume.DiskUser = (*Driver)(nil)
)

// Config tunes the driver; the zero value is the default.
type Config struct {
	// NoQuota leaves the filesystem's quotas as they are and volumes
	// unbounded (Limit then fails).
	NoQuota bool
	// Reserve is the space sandbox volumes together leave free for the
	// node; 0 means DefaultReserve of the filesystem's size.
	Reserve uint64
	// Image is the loopback image the filesystem lives in, if it does: the
	// free space of the filesystem holding it bounds the sandboxes too.
	Image string
}

// New checks that root is on btrfs, prepares it and returns the driver,
// with the default Config.
func New(root string) (*Driver, error) { return NewWithConfig(root, Config{}) }

// NewWithConfig checks that root is on btrfs, prepares it, turns quotas on
// (see quota.go; when that fails the driver still works, QuotaMode says why
// volumes are unbounded) and returns the driver.
func NewWithConfig(root string, cfg Config) (*Driver, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("btrfs: create %s: %w", root, err)
	}
	if !IsBtrfs(root) {
		return nil, fmt.Errorf("%w: btrfs: %s is not on a btrfs filesystem", errdefs.ErrFailedPrecondition, root)
	}
	if _, err := exec.LookPath("btrfs"); err != nil {
		return nil, fmt.Errorf("%w: btrfs: the btrfs command is missing (apt-get install btrfs-progs): %v", errdefs.ErrFailedPrecondition, err)
	}
	l := volume.Layout{Root: root}
	if err := l.Init(); err != nil {
		return nil, err
	}
	return &Driver{layout: l, quota: openQuota(context.Background(), root, cfg)}, nil
}

// IsBtrfs reports whether path is on a btrfs filesystem.
func IsBtrfs(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.BTRFS_SUPER_MAGIC
}

// Name returns "btrfs".
func (d *Driver) Name() string { return "btrfs" }

// CreateTemplate creates templates/<name> as a subvolume.
func (d *Driver) CreateTemplate(ctx context.Context, name string) (string, error) {
	p, err := d.layout.Template(name)
	if err != nil {
		return "", err
	}
	if _, err := os.Lstat(p); err == nil {
		return "", fmt.Errorf("template %s: %w: already exists", name, errdefs.ErrConflict)
	}
	if err := run(ctx, "subvolume", "create", p); err != nil {
		if _, serr := os.Lstat(p); serr == nil {
			return "", fmt.Errorf("template %s: %w: already exists", name, errdefs.ErrConflict)
		}
		return "", fmt.Errorf("template %s: create: %w", name, err)
	}
	return p, nil
}

// SealTemplate makes the template's subvolume read-only.
func (d *Driver) SealTemplate(ctx context.Context, name string) error {
	p, err := d.existingTemplate(name)
	if err != nil {
		return err
	}
	if err := run(ctx, "property", "set", "-ts", p, "ro", "true"); err != nil {
		return fmt.Errorf("template %s: seal: %w", name, err)
	}
	return nil
}

func (d *Driver) existingTemplate(name string) (string, error) {
	p, err := d.layout.Template(name)
	if err != nil {
		return "", err
	}
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("template %s: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("template %s: %w", name, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("template %s: %w: not a directory", name, errdefs.ErrFailedPrecondition)
	}
	return p, nil
}

// sealed reports whether the subvolume at p is read-only.
func sealed(ctx context.Context, p string) (bool, error) {
	out, err := output(ctx, "property", "get", "-ts", p, "ro")
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(out) == "ro=true", nil
}

// DeleteTemplate deletes the template's subvolume.
func (d *Driver) DeleteTemplate(ctx context.Context, name string) error {
	p, err := d.layout.Template(name)
	if err != nil {
		return err
	}
	return deleteSubvolume(ctx, p)
}

// Templates lists the read-only template subvolumes.
func (d *Driver) Templates(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(d.layout.TemplatesDir())
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() || volume.ValidName(e.Name()) != nil {
			continue
		}
		ok, err := sealed(ctx, filepath.Join(d.layout.TemplatesDir(), e.Name()))
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", e.Name(), err)
		}
		if ok {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// Clone snapshots a sealed template into volumes/<id> (writable).
func (d *Driver) Clone(ctx context.Context, template, id string) (string, error) {
	dst, err := d.layout.Volume(id)
	if err != nil {
		return "", err
	}
	src, err := d.existingTemplate(template)
	if err != nil {
		return "", err
	}
	ok, err := sealed(ctx, src)
	if err != nil {
		return "", fmt.Errorf("template %s: %w", template, err)
	}
	if !ok {
		return "", fmt.Errorf("template %s: %w: not sealed", template, errdefs.ErrFailedPrecondition)
	}
	if _, err := os.Lstat(dst); err == nil {
		return "", fmt.Errorf("volume %s: %w: already exists", id, errdefs.ErrConflict)
	}
	if err := run(ctx, d.snapshotArgs(src, dst)...); err != nil {
		if _, serr := os.Lstat(dst); serr == nil {
			return "", fmt.Errorf("volume %s: %w: already exists", id, errdefs.ErrConflict)
		}
		return "", fmt.Errorf("volume %s: snapshot template %s: %w", id, template, err)
	}
	return dst, nil
}

// Delete deletes volumes/<id>, including subvolumes the sandbox made inside.
func (d *Driver) Delete(ctx context.Context, id string) error {
	p, err := d.layout.Volume(id)
	if err != nil {
		return err
	}
	return deleteSubvolume(ctx, p)
}

// Usage reports the filesystem's capacity, and brings the sandboxes' quota
// group's limit up to date with it.
func (d *Driver) Usage(ctx context.Context) (volume.Usage, error) {
	if err := d.quota.refreshCap(ctx); err != nil {
		return volume.Usage{}, fmt.Errorf("btrfs: %w", err)
	}
	return volume.StatfsUsage(d.layout.Root)
}

// deleteSubvolume deletes the subvolume at p after any nested subvolumes
// (which btrfs refuses to delete through their parent). A missing p is fine.
func deleteSubvolume(ctx context.Context, p string) error {
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	// The common case has no nested subvolume: try without walking the tree.
	if err := run(ctx, "subvolume", "delete", p); err == nil {
		return nil
	}
	if err := deleteNested(ctx, p); err != nil {
		return err
	}
	if err := run(ctx, "subvolume", "delete", p); err != nil {
		return fmt.Errorf("delete subvolume %s: %w", p, err)
	}
	return nil
}

// deleteNested deletes the subvolumes below the subvolume p, deepest first
// (btrfs refuses to delete one that holds another).
//
// The tree is a sandbox's and it may still be changing it, so nothing is
// resolved by path (a walk by path, then "btrfs subvolume delete" of a joined
// path, follows a directory swapped for a symbolic link meanwhile — to
// another sandbox's volume): each directory is opened O_NOFOLLOW relative to
// its parent's descriptor, a subvolume root is known by its inode (256), and
// it is destroyed with BTRFS_IOC_SNAP_DESTROY on its parent's descriptor by
// name, which never follows a link either.
func deleteNested(_ context.Context, p string) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("delete nested subvolumes of %s: %w", p, err)
	}
	defer unix.Close(fd)
	if err := deleteNestedAt(fd, p, 0); err != nil {
		return fmt.Errorf("delete nested subvolumes of %s: %w", p, err)
	}
	return nil
}

// maxNestedDepth bounds how deep deleteNestedAt descends (one descriptor
// per level).
const maxNestedDepth = 4096

func deleteNestedAt(dirFD int, path string, depth int) error {
	if depth > maxNestedDepth {
		return fmt.Errorf("%s: nested deeper than %d directories", path, maxNestedDepth)
	}
	dup, err := unix.Dup(dirFD)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(dup), path)
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("list %s: %w", path, err)
	}
	for _, name := range names {
		sub, err := unix.Openat(dirFD, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOENT) {
			continue // not a directory (a link is never followed), or gone
		}
		if err != nil {
			return fmt.Errorf("open %s/%s: %w", path, name, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(sub, &st)
		if err == nil {
			err = deleteNestedAt(sub, path+"/"+name, depth+1)
		}
		unix.Close(sub)
		if err != nil {
			return err
		}
		if st.Ino == subvolRootIno {
			if err := snapDestroy(dirFD, name); err != nil {
				return fmt.Errorf("delete nested subvolume %s/%s: %w", path, name, err)
			}
		}
	}
	return nil
}

// subvolRootIno is the inode number of every btrfs subvolume's root.
const subvolRootIno = 256

// snapDestroy deletes the subvolume name in the directory dirFD
// (BTRFS_IOC_SNAP_DESTROY).
func snapDestroy(dirFD int, name string) error {
	var args struct {
		fd   int64
		name [4088]byte
	}
	if len(name) >= len(args.name) {
		return fmt.Errorf("name too long")
	}
	copy(args.name[:], name)
	const iocSnapDestroy = 0x5000940f // _IOW(0x94, 15, struct btrfs_ioctl_vol_args)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(dirFD), iocSnapDestroy, uintptr(unsafe.Pointer(&args))); e != 0 {
		return e
	}
	return nil
}

func run(ctx context.Context, args ...string) error {
	_, err := output(ctx, args...)
	return err
}

func output(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "btrfs", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("btrfs %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// Snapshot makes snapshots/<snap>, a read-only snapshot of volumes/<id>.
func (d *Driver) Snapshot(ctx context.Context, id, snap string) (string, error) {
	src, err := d.layout.Volume(id)
	if err != nil {
		return "", err
	}
	dst, err := d.layout.Snapshot(snap)
	if err != nil {
		return "", err
	}
	if fi, err := os.Lstat(src); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("volume %s: %w", id, errdefs.ErrNotFound)
	}
	if _, err := os.Lstat(dst); err == nil {
		return "", fmt.Errorf("snapshot %s: %w: already exists", snap, errdefs.ErrConflict)
	}
	if err := run(ctx, "subvolume", "snapshot", "-r", src, dst); err != nil {
		if _, serr := os.Lstat(dst); serr == nil {
			return "", fmt.Errorf("snapshot %s: %w: already exists", snap, errdefs.ErrConflict)
		}
		return "", fmt.Errorf("snapshot %s of volume %s: %w", snap, id, err)
	}
	return dst, nil
}

// CloneSnapshot makes volumes/<id>, a writable snapshot of snapshots/<snap>.
func (d *Driver) CloneSnapshot(ctx context.Context, snap, id string) (string, error) {
	src, err := d.layout.Snapshot(snap)
	if err != nil {
		return "", err
	}
	dst, err := d.layout.Volume(id)
	if err != nil {
		return "", err
	}
	if fi, err := os.Lstat(src); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("snapshot %s: %w", snap, errdefs.ErrNotFound)
	}
	if _, err := os.Lstat(dst); err == nil {
		return "", fmt.Errorf("volume %s: %w: already exists", id, errdefs.ErrConflict)
	}
	if err := run(ctx, d.snapshotArgs(src, dst)...); err != nil {
		if _, serr := os.Lstat(dst); serr == nil {
			return "", fmt.Errorf("volume %s: %w: already exists", id, errdefs.ErrConflict)
		}
		return "", fmt.Errorf("volume %s from snapshot %s: %w", id, snap, err)
	}
	return dst, nil
}

// DeleteSnapshot deletes snapshots/<snap>.
func (d *Driver) DeleteSnapshot(ctx context.Context, snap string) error {
	p, err := d.layout.Snapshot(snap)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	// A read-only subvolume holding nested subvolumes cannot have them
	// removed; make it writable first (snapshots never nest in practice).
	_ = run(ctx, "property", "set", "-ts", p, "ro", "false")
	return deleteSubvolume(ctx, p)
}

// Snapshots lists snapshots/.
func (d *Driver) Snapshots(ctx context.Context) ([]string, error) { return d.layout.Snapshots() }

// Volumes lists volumes/.
func (d *Driver) Volumes(ctx context.Context) ([]string, error) { return d.layout.Volumes() }
