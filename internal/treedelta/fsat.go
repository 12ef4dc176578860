package treedelta

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"golang.org/x/sys/unix"
)

// openDir opens the directory at path (a host path the caller trusts) without
// following a symlink in its last component.
func openDir(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("treedelta: open directory %s: %w", path, err)
	}
	return fd, nil
}

// openDirAt opens the directory name in dirfd, refusing a symlink.
func openDirAt(dirfd int, name string) (int, error) {
	return unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// beneath opens the directory rel (a clean relative path, "." for the root)
// beneath root as an O_PATH descriptor without following any symlink and
// without leaving root: openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or
// on kernels without openat2 a walk one component at a time with O_NOFOLLOW.
// A symlink anywhere on the way is an error, whether it came from the base or
// from earlier in the stream.
func beneath(root int, rel string) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	}
	fd, err := unix.Openat2(root, rel, &how)
	if !errors.Is(err, unix.ENOSYS) {
		return fd, err
	}
	fd, err = unix.Dup(root)
	if err != nil || rel == "." {
		return fd, err
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." || c == ".." {
			unix.Close(fd)
			return -1, unix.EXDEV
		}
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// readNames lists the names in the directory dirfd (which stays open).
func readNames(dirfd int) ([]string, error) {
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	if _, err := unix.Seek(dup, 0, 0); err != nil {
		return nil, err
	}
	return f.Readdirnames(-1)
}

// maxRemoveDepth bounds the recursion of removeAt: a base tree deeper than
// this cannot be whited out.
const maxRemoveDepth = 4096

// removeAt removes name in dirfd, recursively when it is a directory, never
// following a symlink. A name that does not exist is not an error.
func removeAt(dirfd int, name string, depth int) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	if depth >= maxRemoveDepth {
		return fmt.Errorf("directory nested deeper than %d: %w", maxRemoveDepth, errdefs.ErrResourceExhausted)
	}
	fd, err := openDirAt(dirfd, name)
	if err != nil {
		return err
	}
	names, err := readNames(fd)
	for _, n := range names {
		if err != nil {
			break
		}
		err = removeAt(fd, n, depth+1)
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}
