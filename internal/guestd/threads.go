package guestd

import (
	"runtime"
	"sync"
)

// ReserveThreads makes the Go runtime create n OS threads now and keep them
// idle for later. Inside a sandbox the daemon shares the pids limit with the
// workload: when a fork bomb holds every task, a runtime that needs one more
// thread cannot get it and aborts ("failed to create new OS thread"), and the
// whole sandbox dies with its PID 1. Threads made up front are reused instead
// of created. (A separate pids budget for the daemon is the complete fix; see
// the issue note.)
func ReserveThreads(n int) {
	var started sync.WaitGroup
	release := make(chan struct{})
	for range n {
		started.Add(1)
		go func() {
			// A goroutine locked to its thread keeps that thread to itself,
			// so n of them need n threads; unlocking hands each back to the
			// runtime's idle list rather than ending it.
			runtime.LockOSThread()
			started.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	started.Wait()
	close(release)
}
