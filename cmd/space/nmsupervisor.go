package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/metrics"
	"github.com/spacesandbox/space/internal/pinnedproc"
)

// The --dev server's node-manager restart policy: the first restart waits
// restartBackoffMin, each quick failure after it doubles the wait up to
// restartBackoffMax; a node-manager that answered for restartHealthyAfter
// starts the count again; restartQuickFailures quick failures in a row end
// the server.
const (
	restartBackoffMin    = 500 * time.Millisecond
	restartBackoffMax    = 30 * time.Second
	restartHealthyAfter  = time.Minute
	restartQuickFailures = 5
)

// nmSupervisor keeps the --dev server's node-manager running: one that
// exits after it started (killed, crashed) is started again on the same
// data directory, its sandboxes running on meanwhile (they outlive it, and
// the new one finds them). A node-manager that fails at start, the first
// time or restartQuickFailures times in a row, ends the server with the
// reason instead.
type nmSupervisor struct {
	// start starts one node-manager; restart is false for the first.
	start func(restart bool) (*pinnedproc.Child, error)
	// ready returns once the node-manager started answers, or with why it
	// does not (it exited: exited is closed).
	ready func(ctx context.Context, exited <-chan struct{}, why func() error) error
	log   *slog.Logger

	backoffMin, backoffMax, healthyAfter time.Duration
	maxQuick                             int

	// restarts counts the node-manager's exits after a successful start,
	// by how it ended ("signal", "exit").
	restarts *metrics.CounterVec
}

func newNMSupervisor(start func(restart bool) (*pinnedproc.Child, error), ready func(context.Context, <-chan struct{}, func() error) error, log *slog.Logger) *nmSupervisor {
	return &nmSupervisor{
		start: start, ready: ready, log: log,
		backoffMin: restartBackoffMin, backoffMax: restartBackoffMax, healthyAfter: restartHealthyAfter, maxQuick: restartQuickFailures,
		restarts: metrics.NewCounterVec("space_node_manager_restarts_total",
			"Times the --dev server started its node-manager again after it had exited, by how it ended (signal, exit).", "ended").Always("signal", "exit"),
	}
}

// writeMetrics writes the supervisor's counters.
func (s *nmSupervisor) writeMetrics(w io.Writer) { s.restarts.Write(w) }

// Run starts the node-manager, closes up once it answers, and keeps it
// running until ctx ends (then stops it: SIGTERM, SIGKILL after 20 s); once
// shutdown is closed (the server stops) a node-manager that exits is not
// started again. It returns an error when the node-manager cannot be
// started at first, or has failed maxQuick times in a row within
// healthyAfter of its start.
func (s *nmSupervisor) Run(ctx context.Context, shutdown <-chan struct{}, up chan<- struct{}) error {
	child, err := s.start(false)
	if err != nil {
		return fmt.Errorf("start node-manager: %w", err)
	}
	defer func() { stopNodeManager(child) }()
	if err := s.ready(ctx, child.Done(), child.Wait); err != nil {
		return err
	}
	close(up)
	healthySince := time.Now()
	backoff, quick := s.backoffMin, 0
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-child.Done():
		}
		status := exitStatus(child)
		select {
		case <-shutdown:
			s.log.Info("the node-manager exited as the server stops", "status", status)
			<-ctx.Done()
			return ctx.Err()
		default:
		}
		ran := time.Since(healthySince)
		if ran >= s.healthyAfter {
			backoff, quick = s.backoffMin, 0
		}
		quick++
		if quick >= s.maxQuick {
			return fmt.Errorf("the node-manager exited %d times in a row within %s of its start (last %s): giving up; its error is above", quick, s.healthyAfter, status)
		}
		s.restarts.Inc(endedHow(child))
		s.log.Warn("the node-manager exited; starting it again", "status", status, "ran", ran.Round(time.Millisecond), "restart_in", backoff, "quick_failures", quick)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.backoffMax)
		next, err := s.start(true)
		if err != nil {
			return fmt.Errorf("start node-manager again: %w", err)
		}
		child = next
		if err := s.ready(ctx, child.Done(), child.Wait); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// It did not come up: stopped (when still running) and counted
			// as a quick failure at the next turn.
			s.log.Warn("the restarted node-manager did not come up", "err", err)
			stopNodeManager(child)
			healthySince = time.Now()
			continue
		}
		healthySince = time.Now()
		s.log.Info("the node-manager answers again", "pid", child.Cmd().Process.Pid)
	}
}

// stopNodeManager stops child, when it still runs: SIGTERM, SIGKILL 20 s
// later.
func stopNodeManager(child *pinnedproc.Child) {
	select {
	case <-child.Done():
		return
	default:
	}
	_ = child.Cmd().Process.Signal(syscall.SIGTERM)
	select {
	case <-child.Done():
	case <-time.After(20 * time.Second):
		_ = child.Cmd().Process.Kill()
		<-child.Done()
	}
}

// exitStatus says how an ended child ended ("signal: killed", "exit
// status 1").
func exitStatus(child *pinnedproc.Child) string {
	err := child.Wait()
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// endedHow is the ended label of an ended child: "signal" when a signal
// killed it, "exit" else.
func endedHow(child *pinnedproc.Child) string {
	var ee *exec.ExitError
	if errors.As(child.Wait(), &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "signal"
		}
	}
	return "exit"
}

// withoutFailpoints is environ with its SPACE_FAILPOINTS entry emptied: a
// restarted node-manager is never armed, so that a test which makes one
// die at a failpoint sees the next one do the work. The entry stays, empty
// (every point disarmed), when it was there: it also marks a test process
// (failpoint.TestProcess).
func withoutFailpoints(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if strings.HasPrefix(kv, failpoint.EnvVar+"=") {
			kv = failpoint.EnvVar + "="
		}
		out = append(out, kv)
	}
	return out
}
