package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// copyDir copies the tree at src into dest (which exists and is empty),
// keeping owners (as root), modes, times, symlinks and hard links. Symlinks
// are copied as links and never followed, so a link pointing out of src
// copies as the same link and nothing outside src is read. Device nodes and
// sockets are skipped; extended attributes are not copied. progress receives a line about once a second, and one at the end.
//
// src is read through an os.Root: every name is resolved beneath it, so a
// directory swapped for a symbolic link to a host path while the copy runs
// (src may be a tree others write) makes that entry fail, never a read of the
// host path.
func copyDir(ctx context.Context, src, dest string, progress io.Writer) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("source directory: %w", err)
	}
	if !fi.IsDir() {
		return invalid("source %s is not a directory", src)
	}
	root, err := os.OpenRoot(src)
	if err != nil {
		return fmt.Errorf("source directory: %w", err)
	}
	defer root.Close()
	c := copier{t: tree{root: dest}, src: root, links: map[inode]string{}, shown: time.Now()}
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if rel == "." {
			rel = ""
		}
		if err := c.copy(rel); err != nil {
			return err
		}
		if time.Since(c.shown) >= time.Second {
			c.shown = time.Now()
			fmt.Fprintf(progress, "copying: %d files, %s\n", c.files, progressBytes(c.bytes))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	fmt.Fprintf(progress, "copied %d files, %s\n", c.files, progressBytes(c.bytes))
	slices.Reverse(c.dirs)
	for _, d := range c.dirs {
		if err := errors.Join(os.Chmod(d.path, d.mode), lutimes(d.path, d.mtime)); err != nil {
			return err
		}
	}
	return nil
}

type inode struct{ dev, ino uint64 }

// copier carries the state of one copyDir.
type copier struct {
	t     tree
	src   *os.Root
	links map[inode]string // first destination path of each multiply-linked file
	dirs  []dirMeta
	// files and bytes count the regular files copied, for progress;
	// shown is when the last progress line was written.
	files, bytes int64
	shown        time.Time
}

func (c *copier) copy(rel string) error {
	name := rel
	if name == "" {
		name = "."
	}
	fi, err := c.src.Lstat(name)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no stat data", name)
	}
	mtime := unix.NsecToTimespec(fi.ModTime().UnixNano())
	mode := fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	if rel == "" {
		c.dirs = append(c.dirs, dirMeta{path: c.t.root, mode: mode, mtime: mtime})
		return lchown(c.t.root, int(st.Uid), int(st.Gid))
	}
	dst, err := c.t.parents(rel)
	if err != nil {
		return err
	}
	switch t := fi.Mode().Type(); {
	case t == fs.ModeDir:
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		c.dirs = append(c.dirs, dirMeta{path: dst, mode: mode, mtime: mtime})
		return lchown(dst, int(st.Uid), int(st.Gid))
	case t == fs.ModeSymlink:
		target, err := c.src.Readlink(rel)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
	case t.IsRegular():
		key := inode{uint64(st.Dev), st.Ino}
		if first, ok := c.links[key]; ok && st.Nlink > 1 {
			return os.Link(first, dst)
		}
		if err := copyFile(c.src, rel, dst); err != nil {
			return err
		}
		c.files, c.bytes = c.files+1, c.bytes+fi.Size()
		if st.Nlink > 1 {
			c.links[key] = dst
		}
	case t == fs.ModeNamedPipe:
		if err := unix.Mkfifo(dst, uint32(mode.Perm())); err != nil {
			return err
		}
	default:
		return nil // devices and sockets: the runtime provides /dev
	}
	if err := lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSymlink {
		if err := os.Chmod(dst, mode); err != nil {
			return err
		}
	}
	return lutimes(dst, mtime)
}

// copyFile copies the regular file rel of src without following a symlink
// at either end.
func copyFile(src *os.Root, rel, dst string) error {
	in, err := src.OpenFile(rel, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
