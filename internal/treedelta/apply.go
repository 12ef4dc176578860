package treedelta

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"golang.org/x/sys/unix"
)

// IDRange maps the ids [Stream, Stream+Size) of a stream to the host ids
// [Host, Host+Size).
type IDRange struct {
	Stream, Host, Size uint32
}

// Limits bounds what Apply accepts. A zero field takes its default.
type Limits struct {
	// MaxEntries bounds the number of entries; default 1,000,000.
	MaxEntries int64
	// MaxBytes bounds the total content of regular files; default 64 GiB.
	MaxBytes int64
	// MaxFileSize bounds one regular file; default MaxBytes.
	MaxFileSize int64
	// MaxDepth bounds the components of a path; default MaxDepth.
	MaxDepth int
	// MaxPathLen bounds a path or symlink target in bytes; default 4096.
	MaxPathLen int
	// IDs maps the stream's uids and gids (the same ranges for both) to host
	// ids; an id outside every range is refused. Default: the identity on
	// [0, 65536).
	IDs []IDRange
	// AllowSetID keeps setuid and setgid bits; by default they are cleared.
	AllowSetID bool
}

func (l Limits) withDefaults() Limits {
	if l.MaxEntries <= 0 {
		l.MaxEntries = 1_000_000
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = 64 << 30
	}
	if l.MaxFileSize <= 0 {
		l.MaxFileSize = l.MaxBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = MaxDepth
	}
	if l.MaxPathLen <= 0 {
		l.MaxPathLen = 4096
	}
	if len(l.IDs) == 0 {
		l.IDs = []IDRange{{Stream: 0, Host: 0, Size: 65536}}
	}
	return l
}

// mapID translates a stream id to a host id.
func (l *Limits) mapID(id int) (int, bool) {
	for _, r := range l.IDs {
		if id >= int(r.Stream) && int64(id) < int64(r.Stream)+int64(r.Size) {
			return int(r.Host) + id - int(r.Stream), true
		}
	}
	return 0, false
}

// Apply replays the stream r onto dir, a writable copy of the base the stream
// was made against, within limits, and returns what it did.
//
// Every operation is confined to dir: parents are opened with openat2
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS and the last component is handled with
// *at calls that do not follow it, so no symlink, from the base or planted
// earlier in the stream, is ever followed; a path through one is an error.
// Names must be clean relative paths; hard links must point at regular files
// inside dir; device nodes are refused; uids and gids are mapped through
// limits.IDs; setuid/setgid bits are cleared unless limits.AllowSetID.
//
// On error dir is left partly applied and must be discarded by the caller.
func Apply(ctx context.Context, dir string, r io.Reader, limits Limits) (Stats, error) {
	root, err := openDir(dir)
	if err != nil {
		return Stats{}, err
	}
	defer unix.Close(root)
	a := &applier{root: root, lim: limits.withDefaults(), tr: tar.NewReader(r), times: map[string]unix.Timespec{}, mtimes: map[string]unix.Timespec{}}
	if err := a.run(ctx); err != nil {
		return a.st, fmt.Errorf("treedelta: apply to %s: %w", dir, err)
	}
	return a.st, nil
}

// applier holds the state of one Apply.
type applier struct {
	root int
	lim  Limits
	tr   *tar.Reader
	st   Stats
	// times holds the original mtime of every directory whose entries
	// Apply changed, and mtimes the mtime the stream gives a directory;
	// both are set at the end, when no more entries change.
	times, mtimes map[string]unix.Timespec
	bytes         int64
}

func (a *applier) run(ctx context.Context) error {
	hdr, err := a.tr.Next()
	if err != nil || hdr.Typeflag != tar.TypeXGlobalHeader || hdr.PAXRecords[paxVersion] != version {
		return fmt.Errorf("not a tree delta stream of version %s (first entry: %v): %w", version, err, errdefs.ErrInvalidArgument)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := a.tr.Next()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("stream truncated after %d entries (no end marker): %w", a.st.Entries, errdefs.ErrInvalidArgument)
			}
			return fmt.Errorf("read stream: %w: %w", err, errdefs.ErrInvalidArgument)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			return a.end(hdr)
		}
		a.st.Entries++
		if a.st.Entries > a.lim.MaxEntries {
			return fmt.Errorf("more than %d entries: %w", a.lim.MaxEntries, errdefs.ErrResourceExhausted)
		}
		if err := a.entry(hdr); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
	}
}

// end checks the end marker and sets the directory times.
func (a *applier) end(hdr *tar.Header) error {
	n, err := strconv.ParseInt(hdr.PAXRecords[paxEnd], 10, 64)
	if err != nil || n != a.st.Entries {
		return fmt.Errorf("end marker says %q entries, the stream has %d: %w", hdr.PAXRecords[paxEnd], a.st.Entries, errdefs.ErrInvalidArgument)
	}
	if _, err := a.tr.Next(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("entries after the end marker: %w", errdefs.ErrInvalidArgument)
	}
	return a.setDirTimes()
}

// checkName validates a path from the stream.
func (a *applier) checkName(p string, allowRoot bool) error {
	if p == "." && allowRoot {
		return nil
	}
	if p == "" || len(p) > a.lim.MaxPathLen || strings.ContainsRune(p, 0) || path.IsAbs(p) || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Errorf("path %q: want a clean relative path of at most %d bytes: %w", p, a.lim.MaxPathLen, errdefs.ErrInvalidArgument)
	}
	if n := strings.Count(p, "/") + 1; n > a.lim.MaxDepth {
		return fmt.Errorf("path %q: %d components, the limit is %d: %w", p, n, a.lim.MaxDepth, errdefs.ErrInvalidArgument)
	}
	return nil
}

func (a *applier) entry(hdr *tar.Header) error {
	if hdr.PAXRecords[paxWhiteout] != "" {
		if err := a.checkName(hdr.Name, false); err != nil {
			return err
		}
		a.st.Whiteouts++
		return a.at(hdr.Name, func(dfd int, name string) error { return removeAt(dfd, name, 0) })
	}
	if err := a.checkName(hdr.Name, hdr.Typeflag == tar.TypeDir); err != nil {
		return err
	}
	uid, ok := a.lim.mapID(hdr.Uid)
	gid, ok2 := a.lim.mapID(hdr.Gid)
	if !ok || !ok2 {
		return fmt.Errorf("owner %d:%d outside the allowed id ranges: %w", hdr.Uid, hdr.Gid, errdefs.ErrPermissionDenied)
	}
	mode := uint32(hdr.Mode & 0o7777)
	if !a.lim.AllowSetID {
		mode &^= unix.S_ISUID | unix.S_ISGID
	}
	o := owner{uid: uid, gid: gid, mode: mode, mtime: unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	switch hdr.Typeflag {
	case tar.TypeDir:
		a.st.Dirs++
		return a.mkdir(hdr.Name, o)
	case tar.TypeReg:
		a.st.Files++
		return a.file(hdr, o)
	case tar.TypeSymlink:
		a.st.Symlinks++
		if hdr.Linkname == "" || len(hdr.Linkname) > a.lim.MaxPathLen || strings.ContainsRune(hdr.Linkname, 0) {
			return fmt.Errorf("symlink target of %d bytes: %w", len(hdr.Linkname), errdefs.ErrInvalidArgument)
		}
		return a.at(hdr.Name, func(dfd int, name string) error {
			if err := replace(dfd, name); err != nil {
				return err
			}
			if err := unix.Symlinkat(hdr.Linkname, dfd, name); err != nil {
				return err
			}
			return o.setAt(dfd, name, false)
		})
	case tar.TypeLink:
		a.st.HardLinks++
		return a.link(hdr.Name, hdr.Linkname)
	case tar.TypeFifo:
		a.st.FIFOs++
		return a.at(hdr.Name, func(dfd int, name string) error {
			if err := replace(dfd, name); err != nil {
				return err
			}
			if err := unix.Mknodat(dfd, name, unix.S_IFIFO|0o600, 0); err != nil {
				return err
			}
			return o.setAt(dfd, name, true)
		})
	default:
		return fmt.Errorf("entry type %q refused (device nodes and other special files are not restored): %w", hdr.Typeflag, errdefs.ErrPermissionDenied)
	}
}

// at runs op on the parent directory of p (opened confined to the root) and
// p's last component, after recording the parent's mtime so it can be put
// back at the end.
func (a *applier) at(p string, op func(dirfd int, name string) error) error {
	dfd, parent, name, err := a.parent(p)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if _, ok := a.times[parent]; !ok {
		var st unix.Stat_t
		if err := unix.Fstat(dfd, &st); err != nil {
			return err
		}
		a.times[parent] = st.Mtim
	}
	return op(dfd, name)
}

// parent opens the parent directory of p confined to the root.
func (a *applier) parent(p string) (dfd int, parent, name string, err error) {
	parent, name = path.Split(p)
	parent = strings.TrimSuffix(parent, "/")
	if parent == "" {
		parent = "."
	}
	dfd, err = beneath(a.root, parent)
	if err != nil {
		return -1, "", "", fmt.Errorf("open parent %q (it must be a directory inside the tree, reached without symlinks): %w", parent, err)
	}
	return dfd, parent, name, nil
}

// replace removes whatever is at name so that a new entry can be created.
func replace(dfd int, name string) error {
	return removeAt(dfd, name, 0)
}

// owner is the ownership, mode and mtime an entry gets.
type owner struct {
	uid, gid int
	mode     uint32
	mtime    unix.Timespec
}

// setAt applies o to name in dfd without following it; chmod is skipped for
// symlinks (withMode false), whose mode Linux ignores.
func (o owner) setAt(dfd int, name string, withMode bool) error {
	if err := unix.Fchownat(dfd, name, o.uid, o.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if withMode {
		// Opened with O_PATH|O_NOFOLLOW, name cannot be a symlink here, and
		// fchmod through /proc would be needed for an O_PATH descriptor;
		// fchmodat is safe because nothing else writes the tree meanwhile.
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return fmt.Errorf("became a symlink: %w", errdefs.ErrConflict)
		}
		if err := unix.Fchmodat(dfd, name, o.mode, 0); err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	}
	ts := []unix.Timespec{o.mtime, o.mtime}
	if err := unix.UtimesNanoAt(dfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

func (a *applier) mkdir(p string, o owner) error {
	a.mtimes[p] = o.mtime
	if p == "." {
		if err := unix.Fchown(a.root, o.uid, o.gid); err != nil {
			return err
		}
		return unix.Fchmod(a.root, o.mode)
	}
	return a.at(p, func(dfd int, name string) error {
		var st unix.Stat_t
		err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := removeAt(dfd, name, 0); err != nil {
				return err
			}
			err = unix.ENOENT
		}
		if errors.Is(err, unix.ENOENT) {
			err = unix.Mkdirat(dfd, name, 0o700)
		}
		if err != nil {
			return err
		}
		fd, err := openDirAt(dfd, name)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Fchown(fd, o.uid, o.gid); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
		return unix.Fchmod(fd, o.mode)
	})
}

func (a *applier) file(hdr *tar.Header, o owner) error {
	if hdr.Size < 0 || hdr.Size > a.lim.MaxFileSize {
		return fmt.Errorf("file of %d bytes, the limit is %d: %w", hdr.Size, a.lim.MaxFileSize, errdefs.ErrResourceExhausted)
	}
	if a.bytes+hdr.Size > a.lim.MaxBytes {
		return fmt.Errorf("the stream's files exceed %d bytes: %w", a.lim.MaxBytes, errdefs.ErrResourceExhausted)
	}
	a.bytes += hdr.Size
	a.st.Bytes += hdr.Size
	return a.at(hdr.Name, func(dfd int, name string) error {
		if err := replace(dfd, name); err != nil {
			return err
		}
		fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		if err := copySparse(f, a.tr, hdr.Size); err != nil {
			return err
		}
		if err := f.Chown(o.uid, o.gid); err != nil {
			return err
		}
		if err := unix.Fchmod(fd, o.mode); err != nil {
			return err
		}
		ts := []unix.Timespec{o.mtime, o.mtime}
		return unix.UtimesNanoAt(dfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
	})
}

// copySparse copies size bytes from r to f, leaving all-zero chunks as holes.
func copySparse(f *os.File, r io.Reader, size int64) error {
	buf := make([]byte, 64<<10)
	var off int64
	for off < size {
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), size-off)])
		if err != nil {
			return fmt.Errorf("read content at %d of %d bytes: %w: %w", off, size, err, errdefs.ErrInvalidArgument)
		}
		if !allZero(buf[:n]) {
			if _, err := f.WriteAt(buf[:n], off); err != nil {
				return err
			}
		}
		off += int64(n)
	}
	return f.Truncate(size)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// link makes p a hard link to the regular file target, both inside the root.
func (a *applier) link(p, target string) error {
	if err := a.checkName(target, false); err != nil {
		return fmt.Errorf("hard link target: %w", err)
	}
	if target == p {
		return fmt.Errorf("hard link to itself: %w", errdefs.ErrInvalidArgument)
	}
	tfd, _, tname, err := a.parent(target)
	if err != nil {
		return fmt.Errorf("hard link target: %w", err)
	}
	defer unix.Close(tfd)
	var st unix.Stat_t
	if err := unix.Fstatat(tfd, tname, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("hard link target %q: %w", target, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("hard link target %q is not a regular file: %w", target, errdefs.ErrInvalidArgument)
	}
	return a.at(p, func(dfd int, name string) error {
		if err := replace(dfd, name); err != nil {
			return err
		}
		return unix.Linkat(tfd, tname, dfd, name, 0)
	})
}

// setDirTimes gives every directory Apply touched its mtime: the stream's
// when it has an entry for it, else the one it had before. (Setting a
// directory's times does not change its parent's.)
func (a *applier) setDirTimes() error {
	for p, t := range a.mtimes {
		a.times[p] = t
	}
	for p, t := range a.times {
		ts := []unix.Timespec{t, t}
		if p == "." {
			if err := unix.UtimesNanoAt(a.root, ".", ts, 0); err != nil {
				return fmt.Errorf("set times of the root: %w", err)
			}
			continue
		}
		dfd, _, name, err := a.parent(p)
		if err == nil {
			err = unix.UtimesNanoAt(dfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
			unix.Close(dfd)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("set times of %q: %w", p, err)
		}
	}
	return nil
}
