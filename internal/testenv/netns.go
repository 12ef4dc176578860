package testenv

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs fn on a thread that has joined the network namespace at path
// (/run/netns/NAME), so that the sockets fn opens belong there for their
// life, and returns what fn returned. The thread goes back to this process's
// namespace afterwards; if it cannot, it ends with its goroutine.
func InNetns[T any](path string, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var zero T
		target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{zero, fmt.Errorf("open %s: %w", path, err)}
			return
		}
		defer unix.Close(target)
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{zero, fmt.Errorf("open own network namespace: %w", err)}
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			ch <- result{zero, fmt.Errorf("join %s: %w", path, err)}
			return
		}
		v, err := fn()
		if unix.Setns(self, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}
