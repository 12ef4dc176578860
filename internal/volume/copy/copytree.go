package copyvol

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// maxCopyDepth bounds the directory nesting copyAt follows (one open
// descriptor per level on the way down).
const maxCopyDepth = 4096

// copyAt copies the tree of the directory srcDir into dstDir (an empty
// directory of the store's own), keeping owners, modes, times, extended
// attributes of files and directories, symbolic links (as links), hard links,
// device nodes and FIFOs; sockets are skipped. Regular files are reflinked
// where the filesystem can, and otherwise copied without filling their holes.
//
// The source is a volume a sandbox may be writing while this runs, so nothing
// in it is resolved by path, the way cp -a does (a directory swapped for a
// symbolic link to a host path between cp's stat and its open sent the copy
// to the host path): every entry is opened O_PATH|O_NOFOLLOW relative to its
// parent's descriptor and handled by what that descriptor is — a directory
// is reopened through it, a file read through it, a link read from it. An
// entry gone meanwhile is left out; a changed one is copied as it is now.
func copyAt(ctx context.Context, srcDir, dstDir string) error {
	src, err := unix.Open(srcDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", srcDir, err)
	}
	defer unix.Close(src)
	dst, err := unix.Open(dstDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dstDir, err)
	}
	defer unix.Close(dst)
	c := &treeCopier{ctx: ctx, dstRoot: dst, links: map[[2]uint64]string{}}
	if err := c.dir(src, dst, "", 0); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return fmt.Errorf("stat %s: %w", srcDir, err)
	}
	return c.meta(src, dst, dst, ".", &st)
}

// treeCopier carries one copyAt.
type treeCopier struct {
	ctx     context.Context
	dstRoot int
	links   map[[2]uint64]string // source (dev, ino) of a multiply linked file -> its first copy, relative to dstRoot
}

// dir copies the entries of the source directory src into dst.
func (c *treeCopier) dir(src, dst int, rel string, depth int) error {
	if depth > maxCopyDepth {
		return fmt.Errorf("%s: nested deeper than %d directories: %w", rel, maxCopyDepth, errdefs.ErrResourceExhausted)
	}
	dup, err := unix.Dup(src)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(dup), rel)
	defer f.Close()
	for {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		names, err := f.Readdirnames(1024)
		for _, name := range names {
			if err := c.entry(src, dst, path.Join(rel, name), name, depth); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list %q: %w", rel, err)
		}
	}
}

// entry copies name of src into dst.
func (c *treeCopier) entry(src, dst int, rel, name string, depth int) error {
	fd, err := unix.Openat(src, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil // removed meanwhile
	}
	if err != nil {
		return fmt.Errorf("open %q: %w", rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %q: %w", rel, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		sub, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %q: %w", rel, err)
		}
		defer unix.Close(sub)
		if err := unix.Mkdirat(dst, name, 0o700); err != nil {
			return fmt.Errorf("create %q: %w", rel, err)
		}
		dsub, err := unix.Openat(dst, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open copy of %q: %w", rel, err)
		}
		defer unix.Close(dsub)
		if err := c.dir(sub, dsub, rel, depth+1); err != nil {
			return err
		}
		return c.meta(sub, dsub, dsub, ".", &st)
	case unix.S_IFREG:
		key := [2]uint64{st.Dev, st.Ino}
		if st.Nlink > 1 {
			if first, ok := c.links[key]; ok {
				if err := unix.Linkat(c.dstRoot, first, dst, name, 0); err != nil {
					return fmt.Errorf("link %q to %q: %w", rel, first, err)
				}
				return nil
			}
			c.links[key] = rel
		}
		return c.file(fd, dst, rel, name, &st)
	case unix.S_IFLNK:
		target, err := readlinkFD(fd)
		if err != nil {
			return fmt.Errorf("readlink %q: %w", rel, err)
		}
		if err := unix.Symlinkat(target, dst, name); err != nil {
			return fmt.Errorf("create %q: %w", rel, err)
		}
		return c.meta(-1, -1, dst, name, &st)
	case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO:
		if err := unix.Mknodat(dst, name, st.Mode, int(st.Rdev)); err != nil {
			return fmt.Errorf("create %q: %w", rel, err)
		}
		return c.meta(-1, -1, dst, name, &st)
	}
	return nil // a socket: nothing to copy
}

// file copies the regular file fd (an O_PATH descriptor) as name in dst.
func (c *treeCopier) file(fd, dst int, rel, name string, st *unix.Stat_t) error {
	// Reopening through /proc/self/fd opens the very inode fd holds; no
	// name in the tree is looked up again.
	in, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("open %q: %w", rel, err)
	}
	defer in.Close()
	ofd, err := unix.Openat(dst, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %q: %w", rel, err)
	}
	out := os.NewFile(uintptr(ofd), rel)
	defer out.Close()
	if err := copyData(out, in, st.Size); err != nil {
		return fmt.Errorf("copy %q: %w", rel, err)
	}
	return c.meta(int(in.Fd()), ofd, dst, name, st)
}

// copyData copies the first size bytes of in (its size when the copy began:
// a file growing meanwhile is copied as it was) into out: a reflink when the
// filesystem shares extents, else the data segments only (SEEK_DATA), so a
// sparse file stays sparse — a 1 TiB hole is not written out as zeros.
func copyData(out, in *os.File, size int64) error {
	if err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd())); err == nil {
		return nil
	}
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // a hole to the end
		}
		if err != nil {
			data = off // no SEEK_DATA here: copy everything
		}
		end, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil || end > size {
			end = size
		}
		if data >= end {
			break
		}
		if _, err := in.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := out.Seek(data, io.SeekStart); err != nil {
			return err
		}
		// os.File's ReadFrom uses copy_file_range where it can.
		if _, err := io.CopyN(out, in, end-data); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		off = end
	}
	return out.Truncate(size)
}

// meta sets owner, mode, extended attributes (from srcFD onto xattrDst, when
// srcFD is not -1) and times of name in dst ("." for dst itself), from st.
// The order matters: chown clears set-id bits and file capabilities, so the
// mode and the attributes come after it.
func (c *treeCopier) meta(srcFD, xattrDst, dst int, name string, st *unix.Stat_t) error {
	if err := unix.Fchownat(dst, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown %q: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		if err := unix.Fchmodat(dst, name, st.Mode&0o7777, 0); err != nil {
			return fmt.Errorf("chmod %q: %w", name, err)
		}
	}
	if srcFD >= 0 {
		if err := copyXattrs(srcFD, xattrDst); err != nil {
			return fmt.Errorf("%q: %w", name, err)
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(dst, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times of %q: %w", name, err)
	}
	return nil
}

// readlinkFD reads the target of the symbolic link an O_PATH descriptor holds.
func readlinkFD(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// copyXattrs copies the extended attributes (file capabilities among them)
// of the open file src to dst. A filesystem without them copies none.
func copyXattrs(src, dst int) error {
	size, err := unix.Flistxattr(src, nil)
	if errors.Is(err, unix.ENOTSUP) || size == 0 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list extended attributes: %w", err)
	}
	buf := make([]byte, size)
	if size, err = unix.Flistxattr(src, buf); err != nil {
		return fmt.Errorf("list extended attributes: %w", err)
	}
	for _, attr := range splitNUL(buf[:size]) {
		n, err := unix.Fgetxattr(src, attr, nil)
		if err != nil {
			return fmt.Errorf("read extended attribute %s: %w", attr, err)
		}
		v := make([]byte, n)
		if n, err = unix.Fgetxattr(src, attr, v); err != nil {
			return fmt.Errorf("read extended attribute %s: %w", attr, err)
		}
		if err := unix.Fsetxattr(dst, attr, v[:n], 0); err != nil && !errors.Is(err, unix.ENOTSUP) {
			return fmt.Errorf("write extended attribute %s: %w", attr, err)
		}
	}
	return nil
}

func splitNUL(b []byte) []string {
	var out []string
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		if i > 0 {
			out = append(out, string(b[:i]))
		}
		if i < len(b) {
			i++
		}
		b = b[i:]
	}
	return out
}
