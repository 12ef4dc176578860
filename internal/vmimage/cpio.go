package vmimage

import (
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// CPIO writes an archive in the "newc" format (SVR4 cpio without checksums),
// the only format the Linux kernel unpacks as an initramfs. Entries carry
// mtime 0 and inode numbers in write order, so the same entries always give the
// same bytes (the initramfs is cached by content hash).
//
// The format: each entry is a 110-byte ASCII header ("070701" and thirteen
// 8-digit hex fields), the NUL-terminated name padded to a multiple of four
// bytes counted from the header's start, then the data padded to a multiple
// of four. The archive ends with an entry named "TRAILER!!!".
type CPIO struct {
	w   io.Writer
	ino uint32
	err error
	// closed is set once the trailer is written.
	closed bool
}

// File type bits of a newc mode field (as in st_mode).
const (
	cpioDir     = 0o040000
	cpioReg     = 0o100000
	cpioSymlink = 0o120000
	cpioCharDev = 0o020000
)

const cpioTrailer = "TRAILER!!!"

// NewCPIO returns a writer of a newc archive to w.
func NewCPIO(w io.Writer) *CPIO { return &CPIO{w: w} }

// cpioHeader is one entry's metadata.
type cpioHeader struct {
	name         string
	mode         uint32
	nlink        uint32
	size         uint32
	rdevMajor    uint32
	rdevMinor    uint32
	uid, gid     uint32
	keepTrailing bool
}

// AddDir adds a directory owned by root.
func (c *CPIO) AddDir(name string, perm uint32) error {
	return c.entry(cpioHeader{name: name, mode: cpioDir | perm&0o7777, nlink: 2}, nil)
}

// AddFile adds a regular file owned by root with size bytes read from r; r must
// yield exactly size bytes.
func (c *CPIO) AddFile(name string, perm uint32, size int64, r io.Reader) error {
	if size < 0 || size > 1<<32-1 {
		return c.fail(fmt.Errorf("cpio: %s: size %d does not fit the newc format (at most 4 GiB - 1)", name, size))
	}
	return c.entry(cpioHeader{name: name, mode: cpioReg | perm&0o7777, nlink: 1, size: uint32(size)}, r)
}

// AddSymlink adds a symbolic link to target.
func (c *CPIO) AddSymlink(name, target string) error {
	if target == "" || strings.ContainsRune(target, 0) {
		return c.fail(fmt.Errorf("cpio: %s: symlink target %q: want a non-empty target without NUL", name, target))
	}
	return c.entry(cpioHeader{name: name, mode: cpioSymlink | 0o777, nlink: 1, size: uint32(len(target))}, strings.NewReader(target))
}

// AddCharDev adds a character device node (for example /dev/console, 5:1).
func (c *CPIO) AddCharDev(name string, perm, major, minor uint32) error {
	return c.entry(cpioHeader{name: name, mode: cpioCharDev | perm&0o7777, nlink: 1, rdevMajor: major, rdevMinor: minor}, nil)
}

// Close writes the trailer. It does not close the underlying writer.
func (c *CPIO) Close() error {
	if c.closed {
		return c.err
	}
	err := c.entry(cpioHeader{name: cpioTrailer, nlink: 1, keepTrailing: true}, nil)
	c.closed = true
	return err
}

func (c *CPIO) fail(err error) error {
	if c.err == nil {
		c.err = err
	}
	return err
}

func validName(name string) error {
	if name == "" || name == "." || strings.HasPrefix(name, "/") || path.Clean(name) != name ||
		name == ".." || strings.HasPrefix(name, "../") || strings.ContainsRune(name, 0) || name == cpioTrailer {
		return fmt.Errorf("cpio: entry name %q: want a clean relative path", name)
	}
	return nil
}

func (c *CPIO) entry(h cpioHeader, data io.Reader) error {
	if c.err != nil {
		return c.err
	}
	if c.closed {
		return c.fail(errors.New("cpio: write after Close"))
	}
	if !h.keepTrailing {
		if err := validName(h.name); err != nil {
			return c.fail(err)
		}
	}
	ino := uint32(0)
	if !h.keepTrailing {
		c.ino++
		ino = c.ino
	}
	nameSize := len(h.name) + 1
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, h.mode, h.uid, h.gid, h.nlink, 0, h.size, 0, 0, h.rdevMajor, h.rdevMinor, nameSize, 0)
	buf := make([]byte, 0, len(hdr)+nameSize+3)
	buf = append(buf, hdr...)
	buf = append(buf, h.name...)
	buf = append(buf, 0)
	buf = append(buf, make([]byte, pad4(len(buf)))...)
	if _, err := c.w.Write(buf); err != nil {
		return c.fail(fmt.Errorf("cpio: %s: %w", h.name, err))
	}
	if h.size > 0 {
		n, err := io.CopyN(c.w, data, int64(h.size))
		if err != nil {
			return c.fail(fmt.Errorf("cpio: %s: wrote %d of %d bytes: %w", h.name, n, h.size, err))
		}
		if _, err := c.w.Write(make([]byte, pad4(int(h.size)))); err != nil {
			return c.fail(fmt.Errorf("cpio: %s: %w", h.name, err))
		}
	}
	return nil
}

// pad4 is the number of zero bytes that bring n to a multiple of four.
func pad4(n int) int { return (4 - n%4) % 4 }
