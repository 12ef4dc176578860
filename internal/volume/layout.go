package volume

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// Layout is the directory structure every driver uses under its root:
// templates/<name>, volumes/<id>, snapshots/<snap>, and tmp/ for work in progress (same
// filesystem, so a finished item is renamed into place atomically).
type Layout struct {
	// Root is the store's root directory.
	Root string
}

// Init creates the layout's directories.
func (l Layout) Init() error {
	for _, d := range []string{l.TemplatesDir(), l.VolumesDir(), l.SnapshotsDir(), l.TmpDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("volume: create %s: %w", d, err)
		}
	}
	// The store's root must be traversable by sandbox users only through the
	// mounts the runtime makes; keep it private to root.
	return os.Chmod(l.Root, 0o700)
}

// TemplatesDir holds the templates.
func (l Layout) TemplatesDir() string { return filepath.Join(l.Root, "templates") }

// VolumesDir holds the volumes.
func (l Layout) VolumesDir() string { return filepath.Join(l.Root, "volumes") }

// SnapshotsDir holds the volumes' snapshots.
func (l Layout) SnapshotsDir() string { return filepath.Join(l.Root, "snapshots") }

// Snapshot is the path of snapshot name (validated).
func (l Layout) Snapshot(name string) (string, error) {
	if err := ValidName(name); err != nil {
		return "", err
	}
	return filepath.Join(l.SnapshotsDir(), name), nil
}

// Snapshots lists the validly named snapshots, sorted.
func (l Layout) Snapshots() ([]string, error) {
	entries, err := os.ReadDir(l.SnapshotsDir())
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && ValidName(e.Name()) == nil {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// Volumes lists the validly named volumes, sorted.
func (l Layout) Volumes() ([]string, error) {
	entries, err := os.ReadDir(l.VolumesDir())
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && ValidName(e.Name()) == nil {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// TmpDir holds work in progress.
func (l Layout) TmpDir() string { return filepath.Join(l.Root, "tmp") }

// Template is the path of template name (validated).
func (l Layout) Template(name string) (string, error) {
	if err := ValidName(name); err != nil {
		return "", err
	}
	return filepath.Join(l.TemplatesDir(), name), nil
}

// Volume is the path of volume id (validated).
func (l Layout) Volume(id string) (string, error) {
	if err := ValidName(id); err != nil {
		return "", err
	}
	return filepath.Join(l.VolumesDir(), id), nil
}

// StatfsUsage reports the capacity of the filesystem holding path.
func StatfsUsage(path string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return Usage{}, fmt.Errorf("volume: statfs %s: %w", path, err)
	}
	bs := uint64(st.Bsize)
	return Usage{TotalBytes: st.Blocks * bs, FreeBytes: st.Bavail * bs}, nil
}
