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
// of created. Where the workload has a cgroup of its own (the ns runtime on
// cgroup v1, Config.WorkloadTasks) the daemon keeps a reserve of the
// sandbox's tasks instead and needs none of this.
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
