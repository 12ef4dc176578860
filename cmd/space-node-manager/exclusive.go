package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// lockName is the file in a data directory whose exclusive flock its one
// node-manager holds for its whole life.
const lockName = "node-manager.lock"

// predecessorWait is how long a starting node-manager waits for the one
// before it on the same data directory to finish exiting: a little more
// than exitBound, which caps that exit.
const predecessorWait = 30 * time.Second

// exitBound caps a node-manager's exit once it is told to stop: what is
// still in flight then is abandoned as a crash would abandon it (every
// operation is crash-safe), after its goroutines are written to stderr.
const exitBound = 20 * time.Second

// lockDataDir takes dataDir's node-manager lock, waiting up to wait for a
// node-manager still exiting (one whose server crashed is told to stop by
// its parent-death signal, and the next server starts another at once).
// Two node-managers on one data directory would each collect what the
// other is making, and the one exiting would remove the other's socket.
// The lock goes with this process: the descriptor is close-on-exec, so the
// QEMU processes that outlive it do not keep it.
func lockDataDir(ctx context.Context, dataDir string, wait time.Duration, log *slog.Logger) (*os.File, error) {
	path := filepath.Join(dataDir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the node-manager lock: %w", err)
	}
	deadline := time.Now().Add(wait)
	for told := false; ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		holder := lockHolder(f)
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another node-manager (%s) serves %s and did not exit within %s: stop it first, or give this one another --data-dir", holder, dataDir, wait)
		}
		if !told {
			log.Info("another node-manager of this data directory is still running: waiting for it to exit", "holder", holder, "wait", wait)
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	// The holder's pid, for the message of the next one.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// lockHolder names the process that wrote its pid into the lock file.
func lockHolder(f *os.File) string {
	b := make([]byte, 16)
	n, _ := f.ReadAt(b, 0)
	if pid := strings.TrimSpace(string(b[:n])); pid != "" {
		return "pid " + pid
	}
	return "pid unknown"
}

// boundExit starts a watchdog once ctx is done: if the process has not
// exited bound later, it writes every goroutine's stack to w (what held the
// exit up) and exits with status 1.
func boundExit(ctx context.Context, bound time.Duration, w io.Writer, exit func(int)) {
	go func() {
		<-ctx.Done()
		time.Sleep(bound)
		fmt.Fprintf(w, "space-node-manager: still not exited %s after being told to stop; abandoning what is in flight. Goroutines:\n", bound)
		_ = pprof.Lookup("goroutine").WriteTo(w, 2)
		exit(1)
	}()
}
