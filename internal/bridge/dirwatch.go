package bridge

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"
)

// DefaultDirCheckEvery is how often a bridge checks that its execution
// directory still exists.
const DefaultDirCheckEvery = 2 * time.Second

// openDir opens the execution directory the bridge watches. The bridge
// keeps the descriptor rather than the path: a prepared execution's
// directory is renamed when a sandbox claims it, and a rename must not look
// like a removal.
func openDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("execution directory: %w", err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.IsDir() {
		f.Close()
		return nil, fmt.Errorf("execution directory %s: not a directory (%v)", dir, err)
	}
	return f, nil
}

// dirRemoved reports whether the directory open as f was removed: a
// removed directory has no links left, wherever it was renamed to before.
func dirRemoved(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 0
}

// watchDir returns a channel closed when the directory open as f is
// removed (the user deleted the node's data), checked every period until
// ctx is done. A nil f gives a channel that is never closed.
func watchDir(ctx context.Context, f *os.File, period time.Duration) <-chan struct{} {
	gone := make(chan struct{})
	if f == nil {
		return gone
	}
	go func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if dirRemoved(f) {
					close(gone)
					return
				}
			}
		}
	}()
	return gone
}
