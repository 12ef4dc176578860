package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Enter moves the calling process (every one of its threads) into the
// group directories dirs, as Group.Dirs returned them to the process that
// created the group. It is for a helper that must be in its group before it
// allocates what the group is to bound, and that gets the directories from
// its parent: each must be an absolute, clean path of an existing group on a
// cgroup filesystem, below the root of its hierarchy (the root would be no
// bound at all). It checks every directory before it writes to any.
func Enter(dirs []string) error {
	if len(dirs) == 0 {
		return fmt.Errorf("%w: cgroup: no group directory to enter", errdefs.ErrInvalidArgument)
	}
	for _, d := range dirs {
		if err := validGroupDir(d); err != nil {
			return err
		}
	}
	pid := strconv.Itoa(os.Getpid())
	for _, d := range dirs {
		if err := write(d, "cgroup.procs", pid); err != nil {
			return err
		}
	}
	return nil
}

// validGroupDir checks that dir is a group (not a hierarchy's root) on a
// cgroup filesystem.
func validGroupDir(dir string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return fmt.Errorf("%w: cgroup directory %q is not absolute and clean", errdefs.ErrInvalidArgument, dir)
	}
	for _, p := range []string{dir, filepath.Dir(dir)} {
		var sfs unix.Statfs_t
		if err := unix.Statfs(p, &sfs); err != nil {
			return notFound(p, fmt.Errorf("cgroup: statfs %s: %w", p, err))
		}
		if sfs.Type != unix.CGROUP_SUPER_MAGIC && sfs.Type != unix.CGROUP2_SUPER_MAGIC {
			return fmt.Errorf("%w: %s is not on a cgroup filesystem (the group must lie below a hierarchy's root)", errdefs.ErrInvalidArgument, p)
		}
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return notFound(dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: cgroup %s is not a directory", errdefs.ErrInvalidArgument, dir)
	}
	return nil
}

// Children returns the names of the groups under parent, in any hierarchy
// (a group half created or half removed is in some only), sorted. A parent
// that does not exist has none.
func (h *Hierarchy) Children(parent string) ([]string, error) {
	if err := validName(parent); err != nil {
		return nil, err
	}
	var names []string
	for _, d := range h.parentDirs(parent) {
		entries, err := os.ReadDir(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cgroup: list %s: %w", d, err)
		}
		for _, e := range entries {
			if e.IsDir() && validName(e.Name()) == nil && !slices.Contains(names, e.Name()) {
				names = append(names, e.Name())
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// RemoveParent removes parent's directories that hold no group any more. A
// parent that still has groups, or has gone already, is left as it is: its
// removal is a tidy-up, never a reason to fail.
func (h *Hierarchy) RemoveParent(parent string) error {
	if err := validName(parent); err != nil {
		return err
	}
	for _, d := range h.parentDirs(parent) {
		err := unix.Rmdir(d)
		if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) {
			return fmt.Errorf("cgroup: remove %s: %w", d, err)
		}
	}
	return nil
}

// parentDirs are parent's directories, one per hierarchy in use, without
// duplicates.
func (h *Hierarchy) parentDirs(parent string) []string {
	if h.Mode == V2 {
		return []string{filepath.Join(h.V2, parent)}
	}
	var out []string
	for _, mnt := range h.V1 {
		if d := filepath.Join(mnt, parent); !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}
