// Package swaprace races a host-side walk of a sandbox-controlled tree: it
// swaps an entry of the tree with a symbolic link to a host path, back and
// forth, as fast as it can, the way a hostile sandbox would while the host
// reads or writes its tree. Code that resolves paths by name (filepath.Walk,
// os.Lchown of a joined path, cp -a) is sooner or later sent through the link
// to the host path; code that walks by file descriptor beneath the root
// (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, os.Root, O_NOFOLLOW) is not.
package swaprace

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// Racer swaps one entry with a symbolic link until stopped.
type Racer struct {
	path, decoy string
	stop        chan struct{}
	done        sync.WaitGroup
	swaps       atomic.Int64
	err         error // set by the goroutine before done; read after Stop
}

// Start makes a symbolic link to target beside path (path must exist: a file
// or directory of the tree under attack) and exchanges the two atomically
// with renameat2(RENAME_EXCHANGE) in a loop, so path is, by turns, the real
// entry and a link to target. The racer stops at Stop or at the end of t, and
// path is then left as the real entry.
func Start(t testing.TB, path, target string) *Racer {
	t.Helper()
	r := &Racer{path: path, decoy: filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".swaprace"), stop: make(chan struct{})}
	if err := os.Symlink(target, r.decoy); err != nil {
		t.Fatalf("swaprace: %v", err)
	}
	r.done.Add(1)
	go r.run()
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Error(err)
		}
	})
	return r
}

func (r *Racer) run() {
	defer r.done.Done()
	swapped := false
	for {
		select {
		case <-r.stop:
			if swapped {
				r.err = r.exchange()
			}
			return
		default:
		}
		if err := r.exchange(); err != nil {
			r.err = err
			return
		}
		swapped = !swapped
		r.swaps.Add(1)
	}
}

func (r *Racer) exchange() error {
	if err := unix.Renameat2(unix.AT_FDCWD, r.path, unix.AT_FDCWD, r.decoy, unix.RENAME_EXCHANGE); err != nil {
		return fmt.Errorf("swaprace: exchange %s and %s: %w", r.path, r.decoy, err)
	}
	return nil
}

// Stop ends the racing, restores path as the real entry, removes the link
// and returns what went wrong, if anything. It is safe to call more than once.
func (r *Racer) Stop() error {
	select {
	case <-r.stop:
		return nil
	default:
	}
	close(r.stop)
	r.done.Wait()
	if err := os.Remove(r.decoy); err != nil && r.err == nil {
		r.err = fmt.Errorf("swaprace: remove %s: %w", r.decoy, err)
	}
	return r.err
}

// Swaps is how many exchanges the racer has made so far: a test checks it is
// not zero, or the race it claims to have run never happened.
func (r *Racer) Swaps() int64 { return r.swaps.Load() }
