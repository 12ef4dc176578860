package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
)

// Put stores r under key: it streams r into a temporary file while hashing
// it, records the digest, fsyncs, and renames the file over the object's
// name. See objstore.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) (objstore.Info, error) {
	if err := objstore.ValidKey(key); err != nil {
		return objstore.Info{}, err
	}
	if size < -1 {
		return objstore.Info{}, fmt.Errorf("put object %s: size %d: want -1 or a length: %w", key, size, errdefs.ErrInvalidArgument)
	}
	if err := s.checkLive(ctx); err != nil {
		return objstore.Info{}, fmt.Errorf("put object %s: %w", key, err)
	}
	tmp, f, err := s.createTemp()
	if err != nil {
		return objstore.Info{}, fmt.Errorf("put object %s: %w", key, err)
	}
	committed := false
	defer func() {
		f.Close()
		if !committed {
			unix.Unlinkat(s.tmpFD, tmp, 0)
		}
	}()
	info, err := s.fill(ctx, key, f, r, size)
	if err != nil {
		return objstore.Info{}, err
	}
	if err := s.commit(ctx, key, tmp); err != nil {
		return objstore.Info{}, fmt.Errorf("put object %s: %w", key, err)
	}
	committed = true
	return info, nil
}

// createTemp makes a fresh temporary file, mode 0600, locked against
// CollectTemp for as long as it stays open.
func (s *Store) createTemp() (string, *os.File, error) {
	for range 3 {
		name := randomName()
		fd, err := unix.Openat(s.tmpFD, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, fileMode)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("create temporary file: %w: %w", err, classify(err))
		}
		f := os.NewFile(uintptr(fd), s.dir+"/"+tmpDirName+"/"+name)
		// Blocking: CollectTemp only ever holds the lock of an old file for
		// a moment, and this one is new.
		if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
			f.Close()
			unix.Unlinkat(s.tmpFD, name, 0)
			return "", nil, fmt.Errorf("lock temporary file: %w: %w", err, errdefs.ErrUnavailable)
		}
		// The umask may have narrowed the mode; make it exactly 0600.
		if err := f.Chmod(fileMode); err != nil {
			f.Close()
			unix.Unlinkat(s.tmpFD, name, 0)
			return "", nil, fmt.Errorf("chmod temporary file: %w: %w", err, classify(err))
		}
		return name, f, nil
	}
	return "", nil, fmt.Errorf("create temporary file: three random names taken: %w", errdefs.ErrUnavailable)
}

// fill copies r into f, enforcing size, then records the digest and syncs.
func (s *Store) fill(ctx context.Context, key string, f *os.File, r io.Reader, size int64) (objstore.Info, error) {
	src := r
	if size >= 0 && size < math.MaxInt64 {
		// One byte more than promised tells a long reader from an exact one.
		src = io.LimitReader(r, size+1)
	}
	d := objstore.NewDigester()
	n, err := io.CopyBuffer(fileAndDigest{f, d}, &ctxReader{ctx: ctx, r: src}, make([]byte, copyBuf))
	if err != nil {
		var we *writeError
		if errors.As(err, &we) {
			return objstore.Info{}, fmt.Errorf("put object %s: write: %w: %w", key, we.err, classify(we.err))
		}
		return objstore.Info{}, fmt.Errorf("put object %s: read source after %d bytes: %w", key, n, err)
	}
	if size >= 0 && n != size {
		what := "less"
		if n > size {
			what = "more"
		}
		return objstore.Info{}, fmt.Errorf("put object %s: source gave %s than the %d bytes announced: %w", key, what, size, errdefs.ErrInvalidArgument)
	}
	digest := d.Digest()
	if err := unix.Fsetxattr(int(f.Fd()), digestXattr, []byte(digest), 0); err != nil && !errors.Is(err, unix.ENOTSUP) {
		return objstore.Info{}, fmt.Errorf("put object %s: record digest: %w: %w", key, err, classify(err))
	}
	if err := f.Sync(); err != nil {
		return objstore.Info{}, fmt.Errorf("put object %s: fsync: %w: %w", key, err, classify(err))
	}
	st, err := f.Stat()
	if err != nil {
		return objstore.Info{}, fmt.Errorf("put object %s: stat: %w: %w", key, err, classify(err))
	}
	return objstore.Info{Key: key, Size: n, Digest: digest, ModTime: st.ModTime()}, nil
}

// commit renames the temporary file over the object's name and makes the
// rename durable. A concurrent Delete may remove the (then empty) parent
// directory between mkdirs and rename; commit recreates it and retries.
func (s *Store) commit(ctx context.Context, key, tmp string) error {
	dir, name := objectPath(key)
	var err error
	for range 5 {
		if err := ctx.Err(); err != nil {
			return err
		}
		var parent int
		parent, err = s.mkdirs(dir)
		if err != nil {
			return err
		}
		err = unix.Renameat(s.tmpFD, tmp, parent, name)
		if err == nil {
			err = unix.Fsync(parent)
			unix.Close(parent)
			if err != nil {
				return fmt.Errorf("fsync directory %q: %w: %w", dir, err, classify(err))
			}
			return nil
		}
		unix.Close(parent)
		if !errors.Is(err, unix.ENOENT) {
			break
		}
	}
	return fmt.Errorf("rename into place: %w: %w", err, errClass(err))
}

// errClass is classify for writes: a missing directory while writing means
// the store is broken, not that an object is missing.
func errClass(err error) error {
	if c := classify(err); c != errdefs.ErrNotFound {
		return c
	}
	return errdefs.ErrUnavailable
}

// mkdirs creates dir (relative to the store, "" for the store itself) and
// its parents with mode 0700 and returns a descriptor of it. Each step
// refuses symbolic links.
func (s *Store) mkdirs(dir string) (int, error) {
	cur, err := unix.Dup(s.rootFD)
	if err != nil {
		return -1, fmt.Errorf("dup store directory: %w: %w", err, errdefs.ErrUnavailable)
	}
	if dir == "" {
		return cur, nil
	}
	for seg := range strings.SplitSeq(dir, "/") {
		created := false
		if err := unix.Mkdirat(cur, seg, dirMode); err == nil {
			created = true
		} else if !errors.Is(err, unix.EEXIST) {
			unix.Close(cur)
			return -1, fmt.Errorf("create directory %q: %w: %w", dir, err, errClass(err))
		}
		next, err := openBeneath(cur, seg, unix.O_DIRECTORY|unix.O_RDONLY)
		if err == nil && created {
			// Exact mode despite the umask, and a durable entry.
			err = errors.Join(unix.Fchmod(next, dirMode), unix.Fsync(cur))
		}
		unix.Close(cur)
		if err != nil {
			if next >= 0 {
				unix.Close(next)
			}
			return -1, fmt.Errorf("open directory %q: %w: %w", dir, err, errClass(err))
		}
		cur = next
	}
	return cur, nil
}

// fileAndDigest writes to the temporary file and the digester, tagging
// write errors so fill can tell them from the source's read errors.
type fileAndDigest struct {
	f *os.File
	d *objstore.Digester
}

type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }

func (w fileAndDigest) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.d.Write(p[:n])
	if err != nil {
		return n, &writeError{err}
	}
	return n, nil
}

// ctxReader stops a Put's copy once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// modTime converts a stat timestamp.
func modTime(st *unix.Stat_t) time.Time {
	return time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
}
