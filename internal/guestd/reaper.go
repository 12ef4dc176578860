package guestd

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// reaper is the only code in the daemon that waits for children.
//
// As PID 1 (reapAll) every orphan of the sandbox is re-parented to the daemon
// and must be reaped, so one goroutine calls wait4(-1) on every SIGCHLD and
// hands each status to whoever registered that pid. A status must never be lost
// to that loop: start holds mu across fork and registration, and the loop takes
// mu before looking a pid up, so a child that exits at once is dispatched only
// after its pid is registered. Statuses of pids nobody registered are orphans;
// they are reaped and dropped, so nothing accumulates.
//
// Outside PID 1 orphans go to the real init, and a wait4(-1) would steal
// statuses from other code in the same process (tests), so each child gets its
// own goroutine blocked in wait4(pid). exec.Cmd.Wait is used in neither mode.
type reaper struct {
	all bool
	log *slog.Logger

	mu      sync.Mutex // guards waiting; held across fork+register when all
	waiting map[int]chan unix.WaitStatus
}

func newReaper(all bool, log *slog.Logger) *reaper {
	return &reaper{all: all, log: log, waiting: map[int]chan unix.WaitStatus{}}
}

// start runs fork, which must return the pid of a new child, and returns a
// channel that receives the child's wait status exactly once.
func (r *reaper) start(fork func() (int, error)) (int, <-chan unix.WaitStatus, error) {
	ch := make(chan unix.WaitStatus, 1)
	if !r.all {
		pid, err := fork()
		if err != nil {
			return 0, nil, err
		}
		go waitPid(pid, ch)
		return pid, ch, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fork()
	if err != nil {
		return 0, nil, err
	}
	r.waiting[pid] = ch
	return pid, ch, nil
}

// waitPid blocks in wait4 for one child; it exits when the child does.
func waitPid(pid int, ch chan<- unix.WaitStatus) {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			// ECHILD: someone else reaped it; report it as killed so the
			// process table still ends the process.
			ws = unix.WaitStatus(unix.SIGKILL)
		}
		ch <- ws
		return
	}
}

// run reaps children on every SIGCHLD until ctx is done. It does nothing
// outside reapAll mode.
func (r *reaper) run(ctx context.Context) {
	if !r.all {
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGCHLD)
	defer signal.Stop(sigs)
	for {
		r.reapReady()
		select {
		case <-ctx.Done():
			return
		case <-sigs:
		}
	}
}

// reapReady collects every child that has exited, without blocking.
func (r *reaper) reapReady() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.mu.Lock()
		ch, ok := r.waiting[pid]
		delete(r.waiting, pid)
		r.mu.Unlock()
		if ok {
			ch <- ws
		} else {
			r.log.Debug("reaped orphan", "pid", pid, "status", exitStatusString(ws))
		}
	}
}
