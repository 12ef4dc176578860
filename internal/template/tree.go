package template

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// maxPathLen bounds one entry's path inside a template.
const maxPathLen = 4096

// cleanRel turns an entry name from an archive into a clean path relative to
// the template root. It refuses absolute names, any ".." component and NUL;
// "." and empty components are dropped, so "./a//b/" becomes "a/b". The
// result "" names the root itself.
func cleanRel(name string) (string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", invalid("entry name contains NUL")
	}
	if len(name) > maxPathLen {
		return "", invalid("entry name longer than %d bytes", maxPathLen)
	}
	if strings.HasPrefix(name, "/") {
		return "", invalid("entry %q: absolute path", clip(name))
	}
	var parts []string
	for _, p := range strings.Split(name, "/") {
		switch p {
		case "", ".":
		case "..":
			return "", invalid("entry %q: path leaves the root", clip(name))
		default:
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "/"), nil
}

// tree writes entries under root without ever following a symlink: every
// parent of an entry must be a real directory (missing ones are created), and
// an existing entry at the target is removed, not written through.
//
// This is safe because nothing but the builder writes into root while it
// builds (the caller owns root and has not started a sandbox on it); the
// hostile input is the archive, which is applied one entry at a time.
type tree struct {
	root string
	// written, when not nil, makes the tree apply an image layer: it holds
	// the entries the current layer wrote (an opaque directory keeps them),
	// whiteouts are honoured and an entry may replace a directory.
	written map[string]bool
	// owners, when not nil, gets the owner each entry's header names, by
	// its path relative to root (ExtractIfArchive).
	owners map[string]Owner
}

// Owner is the numeric owner an archive entry's header names.
type Owner struct{ UID, GID int }

// parents makes sure every directory above rel exists as a real directory and
// returns rel's absolute path. rel must come from cleanRel and be non-empty.
func (t tree) parents(rel string) (string, error) {
	dirs := strings.Split(rel, "/")
	cur := t.root
	for _, d := range dirs[:len(dirs)-1] {
		cur = filepath.Join(cur, d)
		fi, err := os.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(cur, 0o755); err != nil {
				return "", fmt.Errorf("create directory %s: %w", cur, err)
			}
		case err != nil:
			return "", fmt.Errorf("inspect %s: %w", cur, err)
		case !fi.IsDir():
			return "", fmt.Errorf("entry %q: parent %s is a %s, not a directory: %w",
				clip(rel), strings.TrimPrefix(cur, t.root), describe(fi.Mode()), errdefs.ErrInvalidArgument)
		}
	}
	return filepath.Join(t.root, rel), nil
}

// replace prepares path for a new entry: an existing non-directory is
// removed (a symlink is unlinked, never followed). It reports whether a
// directory is already there; a directory in the way of a non-directory entry
// is an error.
func (t tree) replace(path string, wantDir bool) (dirExists bool, err error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("inspect %s: %w", path, err)
	case fi.IsDir() && wantDir:
		return true, nil
	case fi.IsDir() && t.written != nil:
		// A layer's file replaces a lower layer's directory. RemoveAll
		// unlinks symlinks inside it without following them.
		if err := os.RemoveAll(path); err != nil {
			return false, fmt.Errorf("replace directory %s: %w", path, err)
		}
		return false, nil
	case fi.IsDir():
		return false, fmt.Errorf("%s: a directory is in the way of a file entry: %w",
			strings.TrimPrefix(path, t.root), errdefs.ErrInvalidArgument)
	}
	if err := os.Remove(path); err != nil {
		return false, fmt.Errorf("replace %s: %w", path, err)
	}
	return false, nil
}

// writeFile creates (replacing) a regular file rel with data, opened with
// O_NOFOLLOW so that even a racing symlink would not be followed.
func (t tree) writeFile(rel string, data []byte, mode fs.FileMode) error {
	path, err := t.parents(rel)
	if err != nil {
		return err
	}
	if _, err := t.replace(path, false); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, mode)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close(), os.Chmod(path, mode))
}

// mkdir creates directory rel (and its parents) with mode, keeping an
// existing directory but setting its mode.
func (t tree) mkdir(rel string, mode fs.FileMode) error {
	path, err := t.parents(rel)
	if err != nil {
		return err
	}
	exists, err := t.replace(path, true)
	if err != nil {
		return err
	}
	if !exists {
		if err := os.Mkdir(path, mode); err != nil {
			return fmt.Errorf("create directory %s: %w", path, err)
		}
	}
	return os.Chmod(path, mode)
}

func describe(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsRegular():
		return "file"
	default:
		return "special file"
	}
}

// lchown sets an entry's owner when running as root; an unprivileged build
// keeps the builder's own uid (it could not create other owners anyway).
func lchown(path string, uid, gid int) error {
	if os.Geteuid() != 0 {
		return nil
	}
	if err := os.Lchown(path, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", path, err)
	}
	return nil
}

// lutimes sets an entry's modification time without following a symlink.
func lutimes(path string, mtime unix.Timespec) error {
	ts := []unix.Timespec{mtime, mtime}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times of %s: %w", path, err)
	}
	return nil
}
