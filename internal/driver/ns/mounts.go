package ns

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
)

// initMounts are detached mounts prepared by the parent for ns-init.
type initMounts struct {
	rootFD, guestFD int
}

func (m *initMounts) Close() {
	if m.rootFD > 0 {
		unix.Close(m.rootFD)
	}
	if m.guestFD > 0 {
		unix.Close(m.guestFD)
	}
}

// prepareMounts clones the rootfs and the guest binary as detached mounts and,
// unless disabled, id-maps them to the child's user namespace: files owned by
// host root then belong to the sandbox's root, and what the sandbox's root
// writes lands on disk owned by host root, so the template stays shareable.
//
// Only a privileged process in the initial user namespace may create an
// idmapped mount, so the parent does it and passes the fds; ns-init attaches
// them in its own mount namespace with move_mount.
//
// Fallback: a filesystem without idmap support (EINVAL/EOPNOTSUPP) gets its
// rootfs chowned into the sandbox's range instead (uid u becomes base+u). That
// is slower (a walk of the whole tree) and makes the clone specific to this uid
// range, which is why executions of one sandbox share one range.
func (d *Driver) prepareMounts(spec driver.Spec, st *state, pid int) (*initMounts, error) {
	m := &initMounts{}
	var err error
	if m.rootFD, err = cloneMount(spec.RootFS); err != nil {
		return nil, err
	}
	if m.guestFD, err = cloneMount(spec.GuestBinary); err != nil {
		m.Close()
		return nil, err
	}
	if err := setAttr(m.guestFD, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, -1); err != nil {
		m.Close()
		return nil, fmt.Errorf("guest binary %s: make read-only: %w", spec.GuestBinary, err)
	}
	userns, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("open the sandbox's user namespace: %w", err)
	}
	defer unix.Close(userns)
	useIDMap := !d.cfg.DisableIDMap
	if useIDMap {
		err := setAttr(m.rootFD, unix.MOUNT_ATTR_IDMAP, userns)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
			d.log.Warn("rootfs filesystem refuses idmapped mounts; chowning it into the sandbox's uid range instead (slower)", "exec", spec.ExecID, "rootfs", spec.RootFS, "err", err)
			useIDMap = false
		} else if err != nil {
			m.Close()
			return nil, fmt.Errorf("rootfs %s: idmapped mount: %w", spec.RootFS, err)
		}
	}
	if !useIDMap {
		if err := shiftOwners(spec.RootFS, st.UIDBase); err != nil {
			m.Close()
			return nil, err
		}
		st.Shifted = true
	}
	// The guest binary is id-mapped too when it can be, so that it shows as
	// root's inside; when it cannot, it stays readable and executable by all.
	_ = setAttr(m.guestFD, unix.MOUNT_ATTR_IDMAP, userns)
	return m, nil
}

func cloneMount(path string) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return -1, fmt.Errorf("clone mount of %s (open_tree): %w", path, err)
	}
	return fd, nil
}

func setAttr(fd int, attr uint64, userns int) error {
	a := &unix.MountAttr{Attr_set: attr}
	if userns >= 0 {
		a.Userns_fd = uint64(userns)
	}
	return unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, a)
}

// shiftOwners chowns every entry of root whose owner is below RangeSize into
// [base, base+RangeSize), keeping set-id bits (chown clears them). Entries
// already in the range are left alone, so a second run is a no-op; an owner
// outside both means the tree was shifted for another range, which is refused.
//
// The tree is the sandbox's own and a sandbox may change it while this runs
// (another execution, or links it left behind), so nothing is resolved by
// path: each directory is opened beneath root with openat2
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, each entry with O_PATH|O_NOFOLLOW
// relative to that directory, and the owner and mode are changed on that file
// descriptor. A directory swapped for a symbolic link to a host path between
// the listing and the chown gets the link itself chowned, or the walk refused
// (ELOOP), never the host path.
func shiftOwners(root string, base uint32) error {
	rootFD, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("shift rootfs owners: open %s: %w", root, err)
	}
	defer unix.Close(rootFD)
	if err := shiftFD(rootFD, root, base); err != nil {
		return err
	}
	// Directories are visited breadth first by their path beneath root, so
	// a deep tree holds two file descriptors at a time, not one per level.
	queue := []string{"."}
	for len(queue) > 0 {
		rel := queue[0]
		queue = queue[1:]
		dirs, err := shiftDir(rootFD, root, rel, base)
		if err != nil {
			return err
		}
		queue = append(queue, dirs...)
	}
	return nil
}

// shiftDir shifts the entries of the directory rel beneath rootFD and returns
// its subdirectories (paths beneath root).
func shiftDir(rootFD int, root, rel string, base uint32) ([]string, error) {
	fd, err := unix.Openat2(rootFD, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("shift rootfs owners: open %s beneath %s (was it replaced while being shifted?): %w", rel, root, err)
	}
	dir := os.NewFile(uintptr(fd), filepath.Join(root, rel))
	defer dir.Close()
	var subdirs []string
	for {
		names, err := dir.Readdirnames(1024)
		for _, name := range names {
			isDir, err := shiftEntry(fd, filepath.Join(root, rel, name), name, base)
			if err != nil {
				return nil, err
			}
			if isDir {
				subdirs = append(subdirs, filepath.Join(rel, name))
			}
		}
		if errors.Is(err, io.EOF) {
			return subdirs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("shift rootfs owners: list %s: %w", filepath.Join(root, rel), err)
		}
	}
}

// shiftEntry opens name in dirFD without following it and shifts it.
func shiftEntry(dirFD int, path, name string, base uint32) (isDir bool, err error) {
	fd, err := unix.Openat(dirFD, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("shift rootfs owners: open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var sb unix.Stat_t
	if err := unix.Fstat(fd, &sb); err != nil {
		return false, fmt.Errorf("shift rootfs owners: stat %s: %w", path, err)
	}
	return sb.Mode&unix.S_IFMT == unix.S_IFDIR, shiftFD(fd, path, base)
}

// shiftFD shifts the owner of the file fd refers to (an O_PATH descriptor of
// any type, a symbolic link included, or a directory).
func shiftFD(fd int, path string, base uint32) error {
	var sb unix.Stat_t
	if err := unix.Fstat(fd, &sb); err != nil {
		return fmt.Errorf("shift rootfs owners: stat %s: %w", path, err)
	}
	uid, err := shiftID(sb.Uid, base)
	if err != nil {
		return fmt.Errorf("shift rootfs owners: %s: uid %w", path, err)
	}
	gid, err := shiftID(sb.Gid, base)
	if err != nil {
		return fmt.Errorf("shift rootfs owners: %s: gid %w", path, err)
	}
	if uid == sb.Uid && gid == sb.Gid {
		return nil
	}
	if err := unix.Fchownat(fd, "", int(uid), int(gid), unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("shift rootfs owners: %s: %w", path, err)
	}
	if sb.Mode&unix.S_IFMT != unix.S_IFLNK && sb.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		// chmod has no call on an O_PATH descriptor; its /proc/self/fd
		// link names the very inode held, not a path in the tree.
		if err := unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), sb.Mode&0o7777); err != nil {
			return fmt.Errorf("shift rootfs owners: %s: restore mode: %w", path, err)
		}
	}
	return nil
}

func shiftID(id, base uint32) (uint32, error) {
	switch {
	case id < RangeSize:
		return base + id, nil
	case id >= base && id-base < RangeSize:
		return id, nil
	}
	return 0, fmt.Errorf("%d is outside 0..%d and outside this sandbox's range at %d: was the rootfs shifted for another sandbox?", id, RangeSize-1, base)
}
