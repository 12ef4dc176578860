package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
)

// Get opens the object at key. See objstore.Store.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Info, error) {
	f, info, err := s.open(ctx, key)
	if err != nil {
		return nil, objstore.Info{}, fmt.Errorf("get object %s: %w", key, err)
	}
	return f, info, nil
}

// GetRange opens part of the object at key. See objstore.Store.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, objstore.Info, error) {
	f, info, err := s.open(ctx, key)
	if err != nil {
		return nil, objstore.Info{}, fmt.Errorf("get object %s range: %w", key, err)
	}
	if offset < 0 || offset > info.Size || length < -1 {
		f.Close()
		return nil, objstore.Info{}, fmt.Errorf("get object %s: range offset %d length %d outside a %d-byte object: %w",
			key, offset, length, info.Size, errdefs.ErrInvalidArgument)
	}
	if length == -1 || length > info.Size-offset {
		length = info.Size - offset
	}
	return sectionReadCloser{io.NewSectionReader(f, offset, length), f}, info, nil
}

type sectionReadCloser struct {
	*io.SectionReader
	io.Closer
}

// Stat describes the object at key. See objstore.Store.
func (s *Store) Stat(ctx context.Context, key string) (objstore.Info, error) {
	f, info, err := s.open(ctx, key)
	if err != nil {
		return objstore.Info{}, fmt.Errorf("stat object %s: %w", key, err)
	}
	f.Close()
	return info, nil
}

// open opens the object file of key for reading and describes it.
func (s *Store) open(ctx context.Context, key string) (*os.File, objstore.Info, error) {
	if err := objstore.ValidKey(key); err != nil {
		return nil, objstore.Info{}, err
	}
	if err := s.checkLive(ctx); err != nil {
		return nil, objstore.Info{}, err
	}
	dir, name := objectPath(key)
	return openObject(s.rootFD, path.Join(dir, name), key)
}

// openObject opens a regular object file at rel beneath dirFD. O_NONBLOCK
// keeps a FIFO planted in the tree from blocking the open; anything but a
// regular file is refused.
func openObject(dirFD int, rel, key string) (*os.File, objstore.Info, error) {
	fd, err := openBeneath(dirFD, rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil, objstore.Info{}, fmt.Errorf("object %s: %w", key, errdefs.ErrNotFound)
		}
		if errors.Is(err, unix.ELOOP) {
			return nil, objstore.Info{}, fmt.Errorf("object %s: a symbolic link in the store tree (refused; the store was changed outside SPACE): %w",
				key, errdefs.ErrFailedPrecondition)
		}
		return nil, objstore.Info{}, fmt.Errorf("open: %w: %w", err, classify(err))
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, objstore.Info{}, fmt.Errorf("stat: %w: %w", err, classify(err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, objstore.Info{}, fmt.Errorf("object %s: not a regular file (mode %#o; the store was changed outside SPACE): %w",
			key, st.Mode, errdefs.ErrFailedPrecondition)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, objstore.Info{}, fmt.Errorf("open: %w: %w", err, errdefs.ErrUnavailable)
	}
	info := objstore.Info{Key: key, Size: st.Size, ModTime: modTime(&st), Digest: readDigest(fd)}
	return os.NewFile(uintptr(fd), rel), info, nil
}

// readDigest returns the digest recorded at Put time, or "" when there is
// none or it is malformed.
func readDigest(fd int) string {
	buf := make([]byte, 128)
	n, err := unix.Fgetxattr(fd, digestXattr, buf)
	if err != nil || !objstore.ValidDigest(string(buf[:n])) {
		return ""
	}
	return string(buf[:n])
}

// Delete removes the object at key and then its directories that became
// empty. See objstore.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := objstore.ValidKey(key); err != nil {
		return err
	}
	if err := s.checkLive(ctx); err != nil {
		return fmt.Errorf("delete object %s: %w", key, err)
	}
	dir, name := objectPath(key)
	parent, err := s.openDir(dir)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete object %s: open directory: %w: %w", key, err, classify(err))
	}
	err = unix.Unlinkat(parent, name, 0)
	if err == nil {
		err = unix.Fsync(parent)
	} else if errors.Is(err, unix.ENOENT) {
		err = nil
	}
	unix.Close(parent)
	if err != nil {
		return fmt.Errorf("delete object %s: %w: %w", key, err, errClass(err))
	}
	s.pruneDirs(dir)
	return nil
}

// openDir opens dir (relative to the store, "" for the store) for reading.
// It always opens afresh: a dup would share its read offset with rootFD.
func (s *Store) openDir(dir string) (int, error) {
	if dir == "" {
		dir = "."
	}
	return openBeneath(s.rootFD, dir, unix.O_DIRECTORY|unix.O_RDONLY)
}

// pruneDirs removes dir and its ancestors while they are empty. It is best
// effort: an empty directory left behind costs nothing, and a Put racing
// with the removal recreates what it needs (see commit).
func (s *Store) pruneDirs(dir string) {
	for dir != "" {
		parentDir, seg := path.Split(dir)
		parentDir = strings.TrimSuffix(parentDir, "/")
		parent, err := s.openDir(parentDir)
		if err != nil {
			return
		}
		err = unix.Unlinkat(parent, seg, unix.AT_REMOVEDIR)
		unix.Close(parent)
		if err != nil {
			return
		}
		dir = parentDir
	}
}

// List describes the objects whose keys start with prefix, sorted by key.
// See objstore.Store. Entries that are not objects (temporary files,
// symbolic links, anything without the object suffix) are skipped.
func (s *Store) List(ctx context.Context, prefix string) ([]objstore.Info, error) {
	if err := objstore.ValidPrefix(prefix); err != nil {
		return nil, err
	}
	if err := s.checkLive(ctx); err != nil {
		return nil, fmt.Errorf("list objects %q: %w", prefix, err)
	}
	// Start at the deepest directory the prefix names completely.
	start := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = prefix[:i]
	}
	fd, err := s.openDir(start)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list objects %q: %w: %w", prefix, err, classify(err))
	}
	var out []objstore.Info
	if err := s.walk(ctx, fd, start, prefix, 0, &out); err != nil {
		return nil, fmt.Errorf("list objects %q: %w", prefix, err)
	}
	slices.SortFunc(out, func(a, b objstore.Info) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// walk appends the objects under the directory fd (whose key prefix is dir)
// that match prefix, and closes fd.
func (s *Store) walk(ctx context.Context, fd int, dir, prefix string, depth int, out *[]objstore.Info) error {
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	if depth > objstore.MaxKeyLen/2 {
		return nil // deeper than any key: not ours
	}
	entries, err := f.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("read directory %q: %w: %w", dir, err, classify(err))
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		key := name
		if dir != "" {
			key = dir + "/" + name
		}
		switch {
		case e.Type().IsDir():
			if !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				continue
			}
			sub, err := openBeneath(fd, name, unix.O_DIRECTORY|unix.O_RDONLY)
			if err != nil {
				continue // replaced by a link or removed meanwhile: not an object directory
			}
			if err := s.walk(ctx, sub, key, prefix, depth+1, out); err != nil {
				return err
			}
		case e.Type().IsRegular() && strings.HasSuffix(name, objectSuffix):
			key = strings.TrimSuffix(key, objectSuffix)
			if !strings.HasPrefix(key, prefix) || objstore.ValidKey(key) != nil {
				continue
			}
			obj, info, err := openObject(fd, name, key)
			if errdefs.IsNotFound(err) || errdefs.IsFailedPrecondition(err) {
				continue // deleted or replaced meanwhile
			}
			if err != nil {
				return err
			}
			obj.Close()
			*out = append(*out, info)
		}
	}
	return nil
}
