package filestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// CollectTemp removes what dead Puts left in the temporary directory and
// returns how many entries it removed. A temporary file is removed only when
// no writer holds its flock (the writer died, or finished and already renamed
// it away) and it was last written more than a minute ago; a Put in progress
// is never disturbed, even one in another process sharing the directory.
// Open runs it; long-lived owners may run it periodically.
func (s *Store) CollectTemp(ctx context.Context) (int, error) {
	// A fresh descriptor: a dup of tmpFD would share its read offset.
	fd, err := openBeneath(s.tmpFD, ".", unix.O_DIRECTORY|unix.O_RDONLY)
	if err != nil {
		return 0, fmt.Errorf("object store %s: collect temporary files: %w: %w", s.dir, err, errdefs.ErrUnavailable)
	}
	dir := os.NewFile(uintptr(fd), s.dir+"/"+tmpDirName)
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return 0, fmt.Errorf("object store %s: collect temporary files: %w: %w", s.dir, err, classify(err))
	}
	removed := 0
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		if s.stale(name) {
			if err := unix.Unlinkat(s.tmpFD, name, 0); err == nil {
				removed++
			}
		}
	}
	return removed, nil
}

// stale reports whether the temporary entry name is garbage: a symbolic
// link or other non-regular entry (never made by a Put), or a regular file
// nobody holds locked and older than tempGrace.
func (s *Store) stale(name string) bool {
	fd, err := unix.Openat(s.tmpFD, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return true // a symbolic link: unlinking removes the link only
	}
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return false // unlinkat without AT_REMOVEDIR cannot remove it; leave it
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return true
	}
	if time.Since(modTime(&st)) <= tempGrace {
		return false // maybe a Put between its create and its flock
	}
	// A live Put holds the lock; the check races with nothing that matters
	// because an old file's writer locked it long ago.
	return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil
}
