package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/store/readcache"
)

// sqliteLockWait is how long a starting server waits for another server on
// the same SQLite file to exit (a restart whose predecessor is still
// closing).
var sqliteLockWait = 10 * time.Second

// cachedSQLite is the SQLite store behind the read cache, holding the
// file's lock for as long as it is open.
type cachedSQLite struct {
	*readcache.Store
	lock *os.File
}

// Close closes the store, then gives the file up to the next server.
func (s cachedSQLite) Close() error {
	err := s.Store.Close()
	s.lock.Close()
	return err
}

// lockSQLite takes the exclusive flock of path+".lock". The read cache is
// right only while this process is the file's one writer: a second server
// on the same file would revoke keys this one keeps serving, so it is
// refused instead. The descriptor is close-on-exec (os.OpenFile), so the
// processes the server starts do not keep the lock.
func lockSQLite(ctx context.Context, path string) (*os.File, error) {
	lockPath := path + ".lock"
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the database lock: %w", err)
	}
	deadline := time.Now().Add(sqliteLockWait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", lockPath, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another space server uses the SQLite database %s (it holds %s) and did not exit within %s: stop it, or give this one another --data-dir; replicas share a PostgreSQL database (docs/scale-out.md)",
				path, lockPath, sqliteLockWait)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
