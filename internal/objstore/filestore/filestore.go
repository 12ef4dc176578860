// Package filestore is the file:// driver of objstore: objects are regular
// files in a directory tree on a local (or shared) filesystem.
//
// Layout under the store directory (mode 0700; files 0600):
//
//	<dir>/a/b/c@        the object with key "a/b/c"
//	<dir>/.tmp/<random> a Put in progress, or one that died
//
// Keys map onto directories segment by segment; the object itself carries a
// trailing "@", a byte keys never hold, so the objects "a/b" and "a/b/c" can
// both exist (a/b@ beside the directory a/b), as in S3. Key segments never
// start with ".", so .tmp can never collide with an object.
//
// A Put writes a temporary file in .tmp, fsyncs it, renames it over the
// object's name and fsyncs the directory: readers see the old object or the
// new one, never a mix. A Put holds flock on its temporary file; CollectTemp
// (run by Open) removes temporary files that no live writer holds and that are
// older than a minute, which is what a crashed Put leaves behind.
//
// Paths inside the store are resolved with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS) relative to the store directory's descriptor: a
// symbolic link planted anywhere in the tree is never followed (os.Root
// would confine it to the tree but still follow it), and nothing outside
// the tree is reachable. The SHA-256 digest of each object is kept in the
// user.space.sha256 extended attribute, set before the rename so it appears
// atomically with the content.
package filestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
)

const (
	tmpDirName   = ".tmp"
	objectSuffix = "@"
	digestXattr  = "user.space.sha256"
	// tempGrace protects a temporary file between its creation and its
	// writer's flock from CollectTemp.
	tempGrace = time.Minute
	copyBuf   = 256 << 10
	dirMode   = 0o700
	fileMode  = 0o600
)

func init() { objstore.Register("file", openURL) }

// Store is a file:// object store. Its methods are safe for concurrent use;
// Close must not race with other calls.
type Store struct {
	dir    string
	rootFD int // the store directory; every path is resolved beneath it
	tmpFD  int // <dir>/.tmp

	closeOnce sync.Once
}

var _ objstore.Store = (*Store)(nil)

// openURL is the objstore driver for file:///absolute/path URLs.
func openURL(ctx context.Context, u *url.URL) (objstore.Store, error) {
	if u.Opaque != "" || (u.Host != "" && u.Host != "localhost") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("object store URL %q: want file:///absolute/path with no host, query or fragment: %w",
			u.Redacted(), errdefs.ErrInvalidArgument)
	}
	s, err := Open(ctx, u.Path)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Open opens the store in dir, an absolute path, creating the directory
// (mode 0700) when it is missing, and collects the temporary files of Puts
// that died. Symbolic links in dir itself are the operator's and are
// followed; links inside the store never are.
func Open(ctx context.Context, dir string) (*Store, error) {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return nil, fmt.Errorf("object store directory %q: want a clean absolute path: %w", dir, errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("object store directory %s: create: %w: %w", dir, err, errdefs.ErrUnavailable)
	}
	rootFD, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("object store directory %s: open: %w: %w", dir, err, errdefs.ErrUnavailable)
	}
	s := &Store{dir: dir, rootFD: rootFD, tmpFD: -1}
	if err := unix.Mkdirat(rootFD, tmpDirName, dirMode); err != nil && !errors.Is(err, unix.EEXIST) {
		s.Close()
		return nil, fmt.Errorf("object store directory %s: create %s: %w: %w", dir, tmpDirName, err, errdefs.ErrUnavailable)
	}
	if s.tmpFD, err = openBeneath(rootFD, tmpDirName, unix.O_DIRECTORY|unix.O_RDONLY); err != nil {
		s.Close()
		return nil, fmt.Errorf("object store directory %s: open %s: %w: %w", dir, tmpDirName, err, classify(err))
	}
	if _, err := s.CollectTemp(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Close releases the store's directory descriptors. It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.tmpFD >= 0 {
			unix.Close(s.tmpFD)
		}
		unix.Close(s.rootFD)
	})
	return nil
}

// checkLive fails with ErrUnavailable when the store directory was removed
// from under the store: a vanished store is down, not empty.
func (s *Store) checkLive(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(s.rootFD, &st); err != nil {
		return fmt.Errorf("object store %s: %w: %w", s.dir, err, errdefs.ErrUnavailable)
	}
	if st.Nlink == 0 {
		return fmt.Errorf("object store %s: the directory was removed: %w", s.dir, errdefs.ErrUnavailable)
	}
	return nil
}

// objectPath maps a valid key to its file's path relative to the store.
func objectPath(key string) (dir, name string) {
	dir, leaf := path.Split(key)
	return strings.TrimSuffix(dir, "/"), leaf + objectSuffix
}

// randomName returns a fresh temporary file name.
func randomName() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// openBeneath opens name relative to dirFD without following any symbolic
// link and without leaving the tree under dirFD.
func openBeneath(dirFD int, name string, flags int) (int, error) {
	how := unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		fd, err := unix.Openat2(dirFD, name, &how)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if errors.Is(err, unix.ENOSYS) {
			return -1, fmt.Errorf("openat2 is not available (filestore needs Linux 5.6 or later): %w", err)
		}
		return fd, err
	}
}

// classify maps a filesystem error to an errdefs class.
func classify(err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return errdefs.ErrNotFound
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EISDIR), errors.Is(err, unix.EXDEV):
		// A symbolic link, a file where a directory belongs or the
		// reverse: the tree was changed by something other than SPACE.
		return errdefs.ErrFailedPrecondition
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return errdefs.ErrResourceExhausted
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	default:
		return errdefs.ErrUnavailable
	}
}
