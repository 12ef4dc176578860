package treedelta

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"golang.org/x/sys/unix"
)

// PAX records of the format.
const (
	paxVersion  = "SPACE.treedelta"
	paxEnd      = "SPACE.treedelta.end"
	paxWhiteout = "SPACE.whiteout"
	version     = "1"
)

// MaxDepth is the deepest tree Diff walks (and the default Limits.MaxDepth).
const MaxDepth = 1024

// Stats describes one Diff or Apply.
type Stats struct {
	// Entries counts the stream's entries (whiteouts included, the version
	// and end headers not).
	Entries int64
	// Dirs, Files, Symlinks, HardLinks, FIFOs and Whiteouts count the
	// entries by kind.
	Dirs, Files, Symlinks, HardLinks, FIFOs, Whiteouts int64
	// Bytes counts regular file content in the stream.
	Bytes int64
	// SkippedDevices and SkippedSockets count tree entries Diff left out.
	SkippedDevices, SkippedSockets int64
	// Compared counts files whose contents Diff read to compare (metadata
	// equal, ctime different) and CompareBytes the bytes it read doing so.
	Compared, CompareBytes int64
}

// Diff writes to w the stream that turns the tree base into the tree tree
// (see the package documentation for the format). It never follows a symlink
// in either tree, and neither tree may change while it runs (tree is a
// snapshot, or the sandbox is paused).
//
// Diff refuses (ResourceExhausted) a tree whose stream Apply would refuse
// with its default Limits — over 1,000,000 entries or 64 GiB of content — as
// soon as it passes them, rather than writing a stream no one will take;
// DiffLimited takes other limits.
//
// A regular file with more links than the tree holds has a hard link outside
// the tree: its content is another file's (the host's, when the tree sits on
// a host filesystem). Diff refuses such a tree (PermissionDenied) once it has
// seen all of it; the stream written until then has no end marker, so no
// Apply takes it, and the caller discards it.
func Diff(ctx context.Context, base, tree string, w io.Writer) (Stats, error) {
	return DiffLimited(ctx, base, tree, w, Limits{})
}

// DiffLimited is Diff with the entry, content and file size limits of lim
// (zero fields take Apply's defaults; its ID and set-id fields are unused).
func DiffLimited(ctx context.Context, base, tree string, w io.Writer, lim Limits) (Stats, error) {
	d := &differ{ctx: ctx, tw: tar.NewWriter(w), links: map[uint64]*linkLeader{}, lim: lim.withDefaults()}
	bfd, err := openDir(base)
	if err != nil {
		return d.st, err
	}
	defer unix.Close(bfd)
	tfd, err := openDir(tree)
	if err != nil {
		return d.st, err
	}
	defer unix.Close(tfd)
	if err := d.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{paxVersion: version}, Format: tar.FormatPAX}); err != nil {
		return d.st, fmt.Errorf("treedelta: write stream: %w", err)
	}
	var bst, tst unix.Stat_t
	if err := unix.Fstat(bfd, &bst); err != nil {
		return d.st, fmt.Errorf("treedelta: stat %s: %w", base, err)
	}
	if err := unix.Fstat(tfd, &tst); err != nil {
		return d.st, fmt.Errorf("treedelta: stat %s: %w", tree, err)
	}
	if !sameMeta(&bst, &tst) {
		if err := d.emit(".", &tst, -1, ""); err != nil {
			return d.st, err
		}
	}
	if err := d.dir(bfd, tfd, "", 1); err != nil {
		return d.st, fmt.Errorf("treedelta: diff %s against %s: %w", tree, base, err)
	}
	for _, l := range d.links {
		if uint64(l.seen) < l.nlink {
			return d.st, fmt.Errorf("treedelta: diff %s: %s has %d links, %d of them in the tree: a hard link to a file outside the tree, whose content is not the sandbox's to export: %w", tree, l.path, l.nlink, l.seen, errdefs.ErrPermissionDenied)
		}
	}
	end := map[string]string{paxEnd: strconv.FormatInt(d.st.Entries, 10)}
	if err := d.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: end, Format: tar.FormatPAX}); err != nil {
		return d.st, fmt.Errorf("treedelta: write stream: %w", err)
	}
	if err := d.tw.Close(); err != nil {
		return d.st, fmt.Errorf("treedelta: write stream: %w", err)
	}
	return d.st, nil
}

// differ holds the state of one Diff.
type differ struct {
	ctx   context.Context
	tw    *tar.Writer
	st    Stats
	links map[uint64]*linkLeader // tree inode -> first path, for nlink > 1
	lim   Limits
}

// linkLeader is the first path of a multiply linked inode of the tree.
type linkLeader struct {
	path    string
	nlink   uint64 // the inode's link count
	seen    int    // links of it found in the tree
	baseIno uint64 // the base inode at path, 0 when none
	emitted bool
}

// dir compares the directory dir (rel, "" for the root) in both trees; bfd
// is -1 when base has no directory there.
func (d *differ) dir(bfd, tfd int, rel string, depth int) error {
	if depth > d.lim.MaxDepth {
		return fmt.Errorf("%s: nested deeper than %d directories: %w", rel, d.lim.MaxDepth, errdefs.ErrResourceExhausted)
	}
	if err := d.ctx.Err(); err != nil {
		return err
	}
	tnames, err := readNames(tfd)
	if err != nil {
		return fmt.Errorf("read directory %q: %w", rel, err)
	}
	var bnames []string
	if bfd >= 0 {
		if bnames, err = readNames(bfd); err != nil {
			return fmt.Errorf("read base directory %q: %w", rel, err)
		}
	}
	slices.Sort(tnames)
	slices.Sort(bnames)
	i, j := 0, 0
	for i < len(bnames) || j < len(tnames) {
		var err error
		switch {
		case j >= len(tnames) || (i < len(bnames) && bnames[i] < tnames[j]):
			err = d.whiteout(path.Join(rel, bnames[i]))
			i++
		case i >= len(bnames) || tnames[j] < bnames[i]:
			err = d.entry(-1, tfd, rel, tnames[j], depth)
			j++
		default:
			err = d.entry(bfd, tfd, rel, tnames[j], depth)
			i, j = i+1, j+1
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// entry compares one name present in the tree (and in base when bfd >= 0).
func (d *differ) entry(bfd, tfd int, rel, name string, depth int) error {
	p := path.Join(rel, name)
	var tst, bst unix.Stat_t
	if err := unix.Fstatat(tfd, name, &tst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat %q: %w", p, err)
	}
	inBase := false
	if bfd >= 0 {
		err := unix.Fstatat(bfd, name, &bst, unix.AT_SYMLINK_NOFOLLOW)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("stat base %q: %w", p, err)
		}
		inBase = err == nil
	}
	switch tst.Mode & unix.S_IFMT {
	case unix.S_IFCHR, unix.S_IFBLK:
		d.st.SkippedDevices++
		return d.whiteoutIf(inBase, p)
	case unix.S_IFSOCK:
		d.st.SkippedSockets++
		return d.whiteoutIf(inBase, p)
	case unix.S_IFDIR:
		return d.subdir(bfd, tfd, p, name, &tst, inBase, &bst, depth)
	}
	var bp *unix.Stat_t
	if inBase {
		bp = &bst
	}
	if tst.Mode&unix.S_IFMT == unix.S_IFREG && tst.Nlink > 1 {
		if done, err := d.hardLink(p, &tst, bp); done || err != nil {
			return err
		}
	}
	changed, err := d.changed(bfd, tfd, name, &tst, bp)
	if err != nil || !changed {
		return err
	}
	if l := d.links[tst.Ino]; l != nil && l.path == p {
		l.emitted = true
	}
	target := ""
	if tst.Mode&unix.S_IFMT == unix.S_IFLNK {
		if target, err = readlinkAt(tfd, name); err != nil {
			return fmt.Errorf("readlink %q: %w", p, err)
		}
	}
	return d.emit(p, &tst, tfd, target)
}

func (d *differ) subdir(bfd, tfd int, p, name string, tst *unix.Stat_t, inBase bool, bst *unix.Stat_t, depth int) error {
	baseDir := inBase && bst.Mode&unix.S_IFMT == unix.S_IFDIR
	if !baseDir || !sameMeta(bst, tst) {
		if err := d.emit(p, tst, -1, ""); err != nil {
			return err
		}
	}
	sub, err := openDirAt(tfd, name)
	if err != nil {
		return fmt.Errorf("open %q: %w", p, err)
	}
	defer unix.Close(sub)
	bsub := -1
	if baseDir {
		if bsub, err = openDirAt(bfd, name); err != nil {
			return fmt.Errorf("open base %q: %w", p, err)
		}
		defer unix.Close(bsub)
	}
	return d.dir(bsub, sub, p, depth+1)
}

// hardLink handles a regular file with several links: it records the first
// path of the inode, and for a later one writes a hard link entry unless the
// same link is unchanged in the base. done reports that p is handled.
func (d *differ) hardLink(p string, tst, bst *unix.Stat_t) (done bool, err error) {
	l := d.links[tst.Ino]
	if l != nil {
		l.seen++
	}
	if l == nil {
		l = &linkLeader{path: p, nlink: uint64(tst.Nlink), seen: 1}
		if bst != nil && bst.Mode&unix.S_IFMT == unix.S_IFREG {
			l.baseIno = bst.Ino
		}
		d.links[tst.Ino] = l
		return false, nil
	}
	if !l.emitted && l.baseIno != 0 && bst != nil && bst.Mode&unix.S_IFMT == unix.S_IFREG && bst.Ino == l.baseIno {
		return true, nil // the same link, unchanged, in the base
	}
	hdr := header(p, tst)
	hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, l.path, 0
	d.st.HardLinks++
	return true, d.write(hdr)
}

// changed reports whether the non-directory name differs from its base.
func (d *differ) changed(bfd, tfd int, name string, tst, bst *unix.Stat_t) (bool, error) {
	if bst == nil || !sameMeta(bst, tst) {
		return true, nil
	}
	switch tst.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		a, err := readlinkAt(bfd, name)
		if err != nil {
			return false, err
		}
		b, err := readlinkAt(tfd, name)
		return a != b, err
	case unix.S_IFREG:
		if bst.Ctim == tst.Ctim {
			return false, nil
		}
		return d.contentDiffers(bfd, tfd, name, tst.Size)
	}
	return false, nil
}

// sameMeta compares what the stream carries, except contents.
func sameMeta(a, b *unix.Stat_t) bool {
	return a.Mode == b.Mode && a.Uid == b.Uid && a.Gid == b.Gid && a.Mtim == b.Mtim &&
		(a.Mode&unix.S_IFMT == unix.S_IFDIR || a.Size == b.Size)
}

func (d *differ) contentDiffers(bfd, tfd int, name string, size int64) (bool, error) {
	d.st.Compared++
	a, err := openFileAt(bfd, name, size)
	if err != nil {
		return false, err
	}
	defer a.Close()
	b, err := openFileAt(tfd, name, size)
	if err != nil {
		return false, err
	}
	defer b.Close()
	ba, bb := make([]byte, 128<<10), make([]byte, 128<<10)
	for {
		if err := d.ctx.Err(); err != nil {
			return false, err
		}
		na, ea := io.ReadFull(a, ba)
		nb, eb := io.ReadFull(b, bb)
		d.st.CompareBytes += int64(na + nb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return true, nil
		}
		if ea != nil || eb != nil {
			if errors.Is(ea, io.EOF) || errors.Is(ea, io.ErrUnexpectedEOF) {
				return false, nil
			}
			return false, errors.Join(ea, eb)
		}
	}
}

// openFileAt opens the regular file name in dirfd for reading, refusing a
// symlink and (with O_NONBLOCK) never blocking on a FIFO swapped in, and
// checks that it still has size bytes.
func openFileAt(dirfd int, name string, size int64) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != size {
		unix.Close(fd)
		return nil, fmt.Errorf("%q changed during the diff (the tree must not change): %w", name, errdefs.ErrConflict)
	}
	return os.NewFile(uintptr(fd), name), nil
}

func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	if n >= len(buf) {
		return "", fmt.Errorf("symlink %q: target longer than %d bytes: %w", name, unix.PathMax, errdefs.ErrInvalidArgument)
	}
	return string(buf[:n]), nil
}

// header builds the common part of an entry from st.
func header(p string, st *unix.Stat_t) *tar.Header {
	return &tar.Header{
		Name:    p,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()).UTC(),
		Format:  tar.FormatPAX,
	}
}

// emit writes the entry for p; tfd is the tree directory holding a regular
// file's content.
func (d *differ) emit(p string, st *unix.Stat_t, tfd int, target string) error {
	hdr := header(p, st)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hdr.Typeflag = tar.TypeDir
		d.st.Dirs++
	case unix.S_IFLNK:
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		d.st.Symlinks++
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
		d.st.FIFOs++
	case unix.S_IFREG:
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
		if st.Size > d.lim.MaxFileSize {
			return fmt.Errorf("%q: %d bytes, over the %d byte file limit: %w", p, st.Size, d.lim.MaxFileSize, errdefs.ErrResourceExhausted)
		}
		if d.st.Bytes+st.Size > d.lim.MaxBytes {
			return fmt.Errorf("%q: the tree's files pass %d bytes: %w", p, d.lim.MaxBytes, errdefs.ErrResourceExhausted)
		}
		d.st.Files++
		d.st.Bytes += st.Size
		f, err := openFileAt(tfd, path.Base(p), st.Size)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := d.write(hdr); err != nil {
			return err
		}
		if _, err := io.CopyN(d.tw, f, st.Size); err != nil {
			return fmt.Errorf("copy %q into the stream: %w", p, err)
		}
		return nil
	default:
		return fmt.Errorf("%q: unsupported file type %#o: %w", p, st.Mode&unix.S_IFMT, errdefs.ErrInvalidArgument)
	}
	return d.write(hdr)
}

func (d *differ) whiteoutIf(inBase bool, p string) error {
	if !inBase {
		return nil
	}
	return d.whiteout(p)
}

func (d *differ) whiteout(p string) error {
	d.st.Whiteouts++
	return d.write(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o600, PAXRecords: map[string]string{paxWhiteout: "1"}, Format: tar.FormatPAX})
}

func (d *differ) write(hdr *tar.Header) error {
	if d.st.Entries >= d.lim.MaxEntries {
		return fmt.Errorf("%q: the stream passes %d entries: %w", hdr.Name, d.lim.MaxEntries, errdefs.ErrResourceExhausted)
	}
	d.st.Entries++
	if err := d.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write stream entry %q: %w", hdr.Name, err)
	}
	return nil
}
