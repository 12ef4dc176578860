package vmimage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DefaultHeadroomBytes is the free space a root image gets beyond its
// content when RootImage.HeadroomBytes is 0. The image is sparse: headroom
// costs nothing until the sandbox writes.
const DefaultHeadroomBytes = 2 << 30

// RootImage describes a root disk image to build from a template directory.
type RootImage struct {
	// Dir is the template's root directory tree.
	Dir string
	// Dest is the image file to create; it must not exist.
	Dest string
	// HeadroomBytes is the free space beyond the content; 0 means
	// DefaultHeadroomBytes.
	HeadroomBytes int64
}

// Build makes Dest an ext4 filesystem holding Dir (mkfs.ext4 -d), sized from
// the content plus headroom. Inode tables are left uninitialised (the file is
// sparse, so they read as zeros) and the guest mounts with noinit_itable, so
// no background thread writes them into every sandbox's clone.
func (r RootImage) Build(ctx context.Context) error {
	content, err := treeBytes(r.Dir)
	if err != nil {
		return fmt.Errorf("root image from %s: %w", r.Dir, err)
	}
	headroom := r.HeadroomBytes
	if headroom <= 0 {
		headroom = DefaultHeadroomBytes
	}
	// ext4 metadata (journal, group descriptors, inode tables) takes a few
	// percent; a quarter more than the content is ample.
	size := content + content/4 + headroom
	size = (size + 1<<20 - 1) &^ (1<<20 - 1)
	tmp := r.Dest + ".tmp"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("root image %s: %w", r.Dest, err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("root image %s: %w", r.Dest, err)
	}
	f.Close()
	_, err = run(ctx, "", "mkfs.ext4", "-q", "-F", "-m", "0", "-L", "space-root",
		"-E", "lazy_itable_init=1,lazy_journal_init=1", "-d", r.Dir, tmp)
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("root image %s (e2fsprogs 1.43 or later needed for -d): %w", r.Dest, err)
	}
	if err := os.Link(tmp, r.Dest); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("root image %s: %w", r.Dest, err)
	}
	return os.Remove(tmp)
}

// treeBytes adds up the space the files of a tree take, with a block per
// entry for metadata.
func treeBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		total += 4096
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			total += (fi.Size() + 4095) &^ 4095
		}
		return nil
	})
	return total, err
}

// CloneImage makes dst a copy-on-write clone of the image src: a reflink on
// btrfs or XFS, a sparse full copy elsewhere (ext4 has no reflinks; the copy
// is correct, only slower and larger).
func CloneImage(ctx context.Context, src, dst string) error {
	if _, err := run(ctx, "", "cp", "--reflink=auto", "--sparse=always", "--no-dereference", "--", src, dst); err != nil {
		return fmt.Errorf("clone root image %s: %w", src, err)
	}
	return nil
}

// CloneImageFrom makes dst a copy-on-write clone of the open image src (a
// reflink where the file system has them, else a copy of the data extents
// only, holes kept). Cloning from a descriptor, not a path, copies exactly
// the file the caller opened (and perhaps verified).
func CloneImageFrom(ctx context.Context, src *os.File, dst string) error {
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("clone root image %s: %w", src.Name(), err)
	}
	err = cloneFile(ctx, src, out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
		return fmt.Errorf("clone root image %s into %s: %w", src.Name(), dst, err)
	}
	return nil
}

// copyRange copies [start, end) of src to the same offsets of dst: in the
// kernel with copy_file_range where it can (same file system type), else
// through a buffer (across file systems copy_file_range answers EXDEV).
func copyRange(src, dst *os.File, start, end int64) error {
	for pos := start; pos < end; {
		in, out := pos, pos
		n, err := unix.CopyFileRange(int(src.Fd()), &in, int(dst.Fd()), &out, int(min(end-pos, 1<<30)), 0)
		switch {
		case errors.Is(err, unix.EXDEV), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EINVAL):
			return bufferedCopy(src, dst, pos, end)
		case err != nil:
			return fmt.Errorf("copy_file_range: %w", err)
		case n == 0:
			return fmt.Errorf("%s shrank while copied", src.Name())
		}
		pos += int64(n)
	}
	return nil
}

func bufferedCopy(src, dst *os.File, pos, end int64) error {
	buf := make([]byte, 1<<20)
	for pos < end {
		n, err := src.ReadAt(buf[:min(int64(len(buf)), end-pos)], pos)
		if n > 0 {
			if _, werr := dst.WriteAt(buf[:n], pos); werr != nil {
				return fmt.Errorf("copy: %w", werr)
			}
			pos += int64(n)
		}
		if err != nil && pos < end {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("%s shrank while copied", src.Name())
			}
			return fmt.Errorf("copy: %w", err)
		}
	}
	return nil
}

func cloneFile(ctx context.Context, src, dst *os.File) error {
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err == nil {
		return nil
	}
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		start, err := unix.Seek(int(src.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		end, err := unix.Seek(int(src.Fd()), start, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		end = min(end, size)
		if err := copyRange(src, dst, start, end); err != nil {
			return err
		}
		off = end
	}
	return dst.Truncate(size)
}
