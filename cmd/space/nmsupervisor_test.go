package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/pinnedproc"
)

// fakeNodeManagers starts real processes in place of the node-manager:
// script is the sh script of the nth one (0 is the first).
type fakeNodeManagers struct {
	t      *testing.T
	script func(n int) string

	mu       sync.Mutex
	children []*pinnedproc.Child
	restarts []bool
	started  []time.Time
}

func (f *fakeNodeManagers) start(restart bool) (*pinnedproc.Child, error) {
	f.mu.Lock()
	n := len(f.children)
	f.mu.Unlock()
	c, err := pinnedproc.Start(exec.Command("sh", "-c", f.script(n)))
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.children = append(f.children, c)
	f.restarts = append(f.restarts, restart)
	f.started = append(f.started, time.Now())
	return c, nil
}

// ready is the node-manager's answer: one still running 50 ms after its
// start answers; one that exited before has failed at start.
func (f *fakeNodeManagers) ready(ctx context.Context, exited <-chan struct{}, why func() error) error {
	select {
	case <-exited:
		return errors.New("exited at start: " + why().Error())
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(50 * time.Millisecond):
		return nil
	}
}

func (f *fakeNodeManagers) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.children)
}

func (f *fakeNodeManagers) child(n int) *pinnedproc.Child {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.children[n]
}

// waitStarts waits until n node-managers have been started.
func (f *fakeNodeManagers) waitStarts(n int, done <-chan error) {
	f.t.Helper()
	deadline := time.After(30 * time.Second)
	for f.count() < n {
		select {
		case err := <-done:
			f.t.Fatalf("the supervisor returned %v after %d starts, want %d", err, f.count(), n)
		case <-deadline:
			f.t.Fatalf("%d node-managers started in 30 s, want %d", f.count(), n)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (f *fakeNodeManagers) supervisor(quick int, healthy time.Duration) *nmSupervisor {
	s := newNMSupervisor(f.start, f.ready, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.backoffMin, s.backoffMax, s.healthyAfter, s.maxQuick = 20*time.Millisecond, 80*time.Millisecond, healthy, quick
	return s
}

func run(s *nmSupervisor, ctx context.Context, shutdown <-chan struct{}) (<-chan struct{}, <-chan error) {
	up, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- s.Run(ctx, shutdown, up) }()
	return up, done
}

// TestNMSupervisorRestartsAKilledNodeManager: a node-manager killed (-9)
// after its start is started again, as a restart (the failpoints
// stripped), counted by how it ended; the server's end stops the one
// running.
func TestNMSupervisorRestartsAKilledNodeManager(t *testing.T) {
	f := &fakeNodeManagers{t: t, script: func(int) string { return "exec sleep 60" }}
	s := f.supervisor(3, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	up, done := run(s, ctx, nil)
	<-up
	for i := range 2 { // under maxQuick (3): two quick exits in a row
		_ = f.child(i).Cmd().Process.Signal(syscall.SIGKILL)
		f.waitStarts(i+2, done)
		// The next is killed only once it answers (the supervisor's
		// ready: 50 ms).
		time.Sleep(200 * time.Millisecond)
	}
	if got := s.restarts.Value("signal"); got != 2 {
		t.Errorf("space_node_manager_restarts_total{ended=signal} = %d, want 2", got)
	}
	if got := f.restarts; !slices.Equal(got, []bool{false, true, true}) {
		t.Errorf("restart flags %v, want the first start only not a restart", got)
	}
	var b strings.Builder
	s.writeMetrics(&b)
	if !strings.Contains(b.String(), `space_node_manager_restarts_total{ended="signal"} 2`) {
		t.Errorf("metrics:\n%s", b.String())
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run after the end: %v, want context.Canceled", err)
	}
	select {
	case <-f.child(f.count() - 1).Done():
	default:
		t.Errorf("the last node-manager still runs after Run returned")
	}
}

// TestNMSupervisorGivesUpAfterQuickFailures: a node-manager that exits
// soon after every start ends the supervisor after maxQuick exits in a
// row, with the last exit status; the waits between starts double.
func TestNMSupervisorGivesUpAfterQuickFailures(t *testing.T) {
	f := &fakeNodeManagers{t: t, script: func(int) string { return "sleep 0.2; exit 3" }}
	s := f.supervisor(4, time.Hour)
	up, done := run(s, context.Background(), nil)
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("the supervisor still runs a minute after its node-manager started failing")
	}
	select {
	case <-up:
	default:
		t.Errorf("up not closed: the first node-manager had answered")
	}
	if err == nil || !strings.Contains(err.Error(), "4 times in a row") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("Run: %v, want it to give up after 4 quick exits, naming exit status 3", err)
	}
	if n := f.count(); n != 4 {
		t.Errorf("%d node-managers started, want 4 (the first and 3 restarts)", n)
	}
	if got := s.restarts.Value("exit"); got != 3 {
		t.Errorf("restarts{ended=exit} = %d, want 3 (the last exit is not restarted)", got)
	}
	// Each child ran 0.2 s; the waits after it were 20, 40 and 80 ms: a
	// start comes at least its wait after the previous child's 0.2 s.
	for i, wait := range []time.Duration{20, 40, 80} {
		if gap := f.started[i+1].Sub(f.started[i]); gap < 200*time.Millisecond+wait*time.Millisecond {
			t.Errorf("start %d came %v after the previous, want at least 0.2 s + %v", i+1, gap, wait*time.Millisecond)
		}
	}
}

// TestNMSupervisorHealthyRunResetsTheCount: a node-manager that ran
// healthyAfter before it exited is no quick failure: one that dies every
// 0.3 s with healthyAfter 0.1 s is started again and again at maxQuick 2.
func TestNMSupervisorHealthyRunResetsTheCount(t *testing.T) {
	f := &fakeNodeManagers{t: t, script: func(int) string { return "sleep 0.3; exit 1" }}
	s := f.supervisor(2, 100*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, done := run(s, ctx, nil)
	f.waitStarts(5, done)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v, want context.Canceled (never given up)", err)
	}
}

// TestNMSupervisorFailureAtStart: a node-manager that exits before it
// answers ends Run at once with the reason, never restarted, up not
// closed (TestDevServerExitsWhenNodeFails end to end).
func TestNMSupervisorFailureAtStart(t *testing.T) {
	f := &fakeNodeManagers{t: t, script: func(int) string { return "exit 2" }}
	s := f.supervisor(5, time.Hour)
	up, done := run(s, context.Background(), nil)
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "exited at start") {
		t.Errorf("Run: %v, want the failure at start", err)
	}
	select {
	case <-up:
		t.Errorf("up closed for a node-manager that never answered")
	default:
	}
	if n := f.count(); n != 1 {
		t.Errorf("%d starts, want 1", n)
	}
}

// TestNMSupervisorNoRestartAsTheServerStops: a node-manager that exits
// once the server stops (Ctrl-C reaches the whole process group) is not
// started again.
func TestNMSupervisorNoRestartAsTheServerStops(t *testing.T) {
	f := &fakeNodeManagers{t: t, script: func(int) string { return "exec sleep 60" }}
	s := f.supervisor(5, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	shutdown := make(chan struct{})
	up, done := run(s, ctx, shutdown)
	<-up
	close(shutdown)
	_ = f.child(0).Cmd().Process.Signal(syscall.SIGTERM)
	<-f.child(0).Done()
	time.Sleep(200 * time.Millisecond) // ten backoffs
	if n := f.count(); n != 1 {
		t.Errorf("%d starts after the server began to stop, want 1", n)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
}

func TestWithoutFailpoints(t *testing.T) {
	got := withoutFailpoints([]string{"PATH=/bin", "SPACE_FAILPOINTS=create/after-record=exit", "SPACE_FAILPOINTS_X=1", "HOME=/root"})
	want := []string{"PATH=/bin", "SPACE_FAILPOINTS=", "SPACE_FAILPOINTS_X=1", "HOME=/root"}
	if !slices.Equal(got, want) {
		t.Errorf("withoutFailpoints: %q, want %q", got, want)
	}
}
