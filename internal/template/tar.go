package template

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
	progressfmt "github.com/spacesandbox/space/internal/progress"
)

// Limits bound what an archive may unpack to.
type Limits struct {
	// MaxBytes is the total size of all regular files.
	MaxBytes int64
	// MaxEntries is the number of entries.
	MaxEntries int
}

// DefaultLimits are the limits Build applies to tar sources.
var DefaultLimits = Limits{MaxBytes: 64 << 30, MaxEntries: 4 << 20}

// extractTar builds a template from an archive file, compressed or not.
// progress receives a line about once a second, and one at the end.
func extractTar(ctx context.Context, path, dest string, progress io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open archive: %w", err)
	}
	defer f.Close()
	var size int64
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	rr := &readProgress{r: f, total: size, out: progress, shown: time.Now()}
	defer rr.line("read the archive")
	r, wait, err := decompress(ctx, rr)
	if err != nil {
		return err
	}
	err = Extract(ctx, r, dest, DefaultLimits)
	return errors.Join(err, wait())
}

// progressBytes formats a byte count for progress lines (the package's
// functions name their progress writer "progress").
var progressBytes = progressfmt.Bytes

// readProgress writes a line about the bytes read of an archive every second.
type readProgress struct {
	r         io.Reader
	out       io.Writer
	done      int64
	total     int64
	shown     time.Time
	lastShown int64
}

func (p *readProgress) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.done += int64(n)
	if time.Since(p.shown) >= time.Second {
		p.shown = time.Now()
		p.line("extracting")
	}
	return n, err
}

// line writes "WHAT: 12.0 MiB of 40.0 MiB of the archive (30%)".
func (p *readProgress) line(what string) {
	if p.lastShown == p.done && what == "extracting" {
		return
	}
	p.lastShown = p.done
	s := what + ": " + progressBytes(p.done)
	if p.total > 0 {
		s += fmt.Sprintf(" of %s (%.0f%%)", progressBytes(p.total), 100*float64(p.done)/float64(p.total))
	}
	fmt.Fprintln(p.out, s)
}

// decompress recognises the compression of r by its magic bytes and returns
// the plain stream and a function to call when done with it. zstd and xz are
// read through the zstd and xz programs (the standard library has no decoder).
func decompress(ctx context.Context, r io.Reader) (io.Reader, func() error, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(6)
	none := func() error { return nil }
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, invalid("archive: bad gzip header: %v", err)
		}
		return zr, zr.Close, nil
	case bytes.HasPrefix(magic, []byte("BZh")):
		return bzip2.NewReader(br), none, nil
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return filter(ctx, br, "zstd")
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return filter(ctx, br, "xz")
	}
	return br, none, nil
}

// filter runs "prog -dc" over r. The returned wait stops the program if the
// reader gave up early and reports how it ended.
func filter(ctx context.Context, r io.Reader, prog string) (io.Reader, func() error, error) {
	if _, err := exec.LookPath(prog); err != nil {
		return nil, nil, fmt.Errorf("archive is %s-compressed but %s is not installed (apt-get install %s): %w",
			prog, prog, prog, errdefs.ErrFailedPrecondition)
	}
	ctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(ctx, prog, "-dc")
	cmd.Stdin = r
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("%s: %w", prog, err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, nil, fmt.Errorf("start %s: %w", prog, err)
	}
	wait := func() error {
		// Drain what is left so a complete stream ends with exit 0; on an
		// early stop the cancel below kills the program instead.
		_, _ = io.Copy(io.Discard, io.LimitReader(out, 1<<20))
		cancel()
		if err := cmd.Wait(); err != nil && ctx.Err() == nil {
			return fmt.Errorf("%s -dc: %w: %s", prog, err, bytes.TrimSpace(stderr.Bytes()))
		}
		return nil
	}
	return out, wait, nil
}

// dirMeta is a directory's mode and time, applied after its contents are
// written (a read-only directory would refuse them otherwise).
type dirMeta struct {
	path  string
	mode  fs.FileMode
	mtime unix.Timespec
}

// Extract unpacks a tar stream into dest, which must exist. Names are cleaned
// with cleanRel (absolute names and ".." are refused), no entry is written
// through a symlink, hard links must point inside dest at an earlier
// non-directory entry, device nodes are skipped (the runtime provides /dev),
// and the total size and entry count are bounded by lim. Owners are kept when
// running as root.
func Extract(ctx context.Context, r io.Reader, dest string, lim Limits) error {
	_, err := extract(ctx, r, dest, lim, false)
	return err
}

// ExtractLayer applies one image layer (OCI image spec "Applying Changesets")
// onto the tree at dest under Extract's rules, plus the layer rules: a
// ".wh.NAME" entry removes NAME from the lower layers, ".wh..wh..opq" empties
// its directory of what the lower layers put there, and an entry replaces
// whatever is at its path, a directory included. Whiteouts remove through real
// directories only and never name "." or "..". It returns the bytes of
// regular files written, to count against a budget over all layers.
func ExtractLayer(ctx context.Context, r io.Reader, dest string, lim Limits) (int64, error) {
	return extract(ctx, r, dest, lim, true)
}

func extract(ctx context.Context, r io.Reader, dest string, lim Limits, layer bool) (int64, error) {
	return tree{root: dest}.extract(ctx, r, lim, layer)
}

func (t tree) extract(ctx context.Context, r io.Reader, lim Limits, layer bool) (int64, error) {
	if layer {
		t.written = map[string]bool{}
	}
	tr := tar.NewReader(r)
	var total int64
	var dirs []dirMeta
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return total, invalid("archive entry %d: %v", n, err)
		}
		if n >= lim.MaxEntries {
			return total, fmt.Errorf("archive: more than %d entries: %w", lim.MaxEntries, errdefs.ErrResourceExhausted)
		}
		if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeRegA {
			if hdr.Size < 0 || total+hdr.Size > lim.MaxBytes || total+hdr.Size < total {
				return total, fmt.Errorf("archive: more than %d bytes of files: %w", lim.MaxBytes, errdefs.ErrResourceExhausted)
			}
			total += hdr.Size
		}
		d, err := t.entry(hdr, tr)
		if err != nil {
			return total, fmt.Errorf("archive entry %q: %w", clip(hdr.Name), err)
		}
		if d != nil {
			dirs = append(dirs, *d)
		}
	}
	// Deepest first, so a parent's mode is set after its children's times.
	slices.Reverse(dirs)
	for _, d := range dirs {
		// Directories are never replaced by a later entry of the same
		// archive, so each is still a real directory; check anyway before a
		// call that follows symlinks (a layer's whiteout may have removed it).
		fi, err := os.Lstat(d.path)
		if layer && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil || !fi.IsDir() {
			return total, fmt.Errorf("directory %s changed during extraction", d.path)
		}
		if err := errors.Join(os.Chmod(d.path, d.mode), lutimes(d.path, d.mtime)); err != nil {
			return total, err
		}
	}
	return total, nil
}

// entry writes one archive entry. It returns the directory's metadata for a
// directory entry, to be applied at the end.
func (t tree) entry(hdr *tar.Header, r io.Reader) (*dirMeta, error) {
	rel, err := cleanRel(hdr.Name)
	if err != nil {
		return nil, err
	}
	if t.written != nil {
		if done, err := t.whiteout(rel); done || err != nil {
			return nil, err
		}
		// Parents count as written too: an opaque marker after
		// "d/sub/f" must keep d/sub even without an entry of its own.
		for p := rel; p != "." && !t.written[p]; p = path.Dir(p) {
			t.written[p] = true
		}
	}
	mode := fs.FileMode(hdr.Mode).Perm() | unixBits(hdr.Mode)
	mtime := unix.NsecToTimespec(hdr.ModTime.UnixNano())
	if rel == "" { // the root itself: keep its mode, ignore the rest
		if hdr.Typeflag != tar.TypeDir {
			return nil, invalid("the archive root is not a directory")
		}
		return &dirMeta{path: t.root, mode: mode, mtime: mtime}, nil
	}
	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock, tar.TypeCont, tar.TypeGNUSparse:
		return nil, nil // device nodes and exotic entries are skipped
	case tar.TypeDir, tar.TypeReg, tar.TypeRegA, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo:
	default:
		return nil, nil // unknown types carry nothing a root filesystem needs
	}
	path, err := t.parents(rel)
	if err != nil {
		return nil, err
	}
	if t.owners != nil {
		t.owners[rel] = Owner{UID: hdr.Uid, GID: hdr.Gid}
	}
	exists, err := t.replace(path, hdr.Typeflag == tar.TypeDir)
	if err != nil {
		return nil, err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if !exists {
			if err := os.Mkdir(path, 0o700); err != nil {
				return nil, fmt.Errorf("mkdir: %w", err)
			}
		}
		return &dirMeta{path: path, mode: mode, mtime: mtime}, lchown(path, hdr.Uid, hdr.Gid)
	case tar.TypeReg, tar.TypeRegA:
		err = writeRegular(path, r, hdr.Size)
	case tar.TypeSymlink:
		err = writeSymlink(path, hdr.Linkname)
	case tar.TypeLink:
		return nil, t.hardlink(path, hdr.Linkname)
	case tar.TypeFifo:
		err = unix.Mkfifo(path, uint32(mode.Perm()))
	}
	if err != nil {
		return nil, err
	}
	return nil, finishEntry(path, hdr, mode, mtime)
}

// finishEntry applies owner, mode (after the owner: chown clears setuid) and
// time to a non-directory entry.
func finishEntry(path string, hdr *tar.Header, mode fs.FileMode, mtime unix.Timespec) error {
	if err := lchown(path, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeSymlink {
		if err := os.Chmod(path, mode); err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	}
	return lutimes(path, mtime)
}

func writeRegular(path string, r io.Reader, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	_, err = io.CopyN(f, r, size)
	if errors.Is(err, io.EOF) {
		err = invalid("file data shorter than its header says")
	}
	return errors.Join(err, f.Close())
}

func writeSymlink(path, target string) error {
	if target == "" || len(target) > maxPathLen || bytes.IndexByte([]byte(target), 0) >= 0 {
		return invalid("bad symlink target")
	}
	// The target is stored as is: it is resolved later inside the sandbox's
	// own root, never by the builder.
	if err := os.Symlink(target, path); err != nil {
		return fmt.Errorf("symlink: %w", err)
	}
	return nil
}

// hardlink links path to an earlier entry named by the archive. The target
// must be inside the tree, reached through real directories only, and not a
// directory.
func (t tree) hardlink(path, linkname string) error {
	rel, err := cleanRel(linkname)
	if err != nil || rel == "" {
		return invalid("hard link target %q: must be an entry inside the archive", clip(linkname))
	}
	target, err := t.parents(rel)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(target)
	if err != nil {
		return invalid("hard link target %q: not an earlier entry", clip(linkname))
	}
	if fi.IsDir() {
		return invalid("hard link target %q: is a directory", clip(linkname))
	}
	if err := os.Link(target, path); err != nil {
		return fmt.Errorf("hard link: %w", err)
	}
	return nil
}

// unixBits converts tar's setuid, setgid and sticky bits to fs.FileMode.
func unixBits(mode int64) fs.FileMode {
	var m fs.FileMode
	if mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// ExtractIfArchive unpacks file into dest (which must exist) under
// Extract's rules and limits when it is a tar archive, plain or gzip,
// bzip2, xz or zstd compressed, recognised by its content (compression
// magic, then the tar header's "ustar" magic), as Docker's ADD does; it
// reports whether it was one. A file that is not such an archive is left
// alone (false, nil): ADD copies it as a file. Of an archive it returns
// the owner each entry's header names, by its slash-separated path
// relative to dest (a later entry of the same path wins), whether or not
// the extraction could apply it (it does only as root): ADD gives the
// files in the sandbox these owners.
func ExtractIfArchive(ctx context.Context, file, dest string, lim Limits) (map[string]Owner, bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	r, wait, err := decompress(ctx, f)
	if errors.Is(err, errdefs.ErrFailedPrecondition) {
		return nil, false, err // zstd or xz is not installed
	}
	if err != nil {
		// A file with a compression magic that does not decompress is not
		// an archive: it is copied as it is.
		return nil, false, nil
	}
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(512)
	if len(head) < 512 || !bytes.HasPrefix(head[257:], []byte("ustar")) {
		_ = wait()
		return nil, false, nil
	}
	t := tree{root: dest, owners: map[string]Owner{}}
	_, err = t.extract(ctx, br, lim, false)
	return t.owners, true, errors.Join(err, wait())
}
