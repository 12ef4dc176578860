package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

// fakePauser records what the node froze and thawed.
type fakePauser struct {
	mu      sync.Mutex
	paused  map[string]bool
	fail    error
	actions []string
}

func (f *fakePauser) Pause(_ context.Context, id, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.paused[id] = true
	f.actions = append(f.actions, "pause "+id)
	return nil
}

func (f *fakePauser) Resume(_ context.Context, id, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paused[id] = false
	f.actions = append(f.actions, "resume "+id)
	return nil
}

func (f *fakePauser) isPaused(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.paused[id]
}

func newFencedManager(t *testing.T, dir string) (*Manager, *fakePauser) {
	t.Helper()
	m := newTestManager(t, dir)
	fp := &fakePauser{paused: map[string]bool{}}
	m.pauser = fp
	return m, fp
}

// runFence runs the fence loop until the test ends.
func runFence(t *testing.T, m *Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.RunFence(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFenceFreezesWhenLeaseEnds: once no heartbeat has been answered for
// the lease, every running sandbox execution is frozen and marked fenced
// (paused, pooled and retired ones are left alone), its streams are cut,
// and the node refuses to start or thaw anything; a renewal lets the
// control plane thaw it, and nothing else does.
func TestFenceFreezesWhenLeaseEnds(t *testing.T) {
	m, fp := newFencedManager(t, t.TempDir())
	running := &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g1-a", SandboxID: "sb1", Generation: 1, Runtime: "ns"}}
	paused := &Record{StartExecution: nodev1.StartExecution{ExecID: "sb2-g1-b", SandboxID: "sb2", Generation: 1, Runtime: "ns"}, Paused: true}
	pooled := &Record{StartExecution: nodev1.StartExecution{ExecID: "pool-x1", Runtime: "ns"}, Pool: true}
	retired := &Record{StartExecution: nodev1.StartExecution{ExecID: "sb3-g1-c", SandboxID: "sb3", Generation: 1, Runtime: "ns"}, Retired: true, RetiredBy: 2}
	for _, rec := range []*Record{running, paused, pooled, retired} {
		saveRecord(t, m, rec)
	}
	stream, release, _ := m.streams.acquire(context.Background(), surfaceGuest, running.ExecID)
	defer release()

	m.renewLease(time.Now(), 300*time.Millisecond)
	runFence(t, m)
	if m.leaseEnded(time.Now()) {
		t.Fatal("lease ended right after a renewal")
	}
	waitFor(t, "the running execution is fenced", func() bool {
		rec, err := m.records.load(running.ExecID)
		return err == nil && rec.Fenced && rec.Paused
	})
	if !fp.isPaused(running.ExecID) {
		t.Error("fenced without being frozen by the runtime")
	}
	for _, rec := range []*Record{paused, pooled, retired} {
		if got, _ := m.records.load(rec.ExecID); got.Fenced {
			t.Errorf("%s (paused %v, pool %v, retired %v) was fenced", rec.ExecID, rec.Paused, rec.Pool, rec.Retired)
		}
	}
	select {
	case <-stream.Done():
	case <-time.After(5 * time.Second):
		t.Error("a stream of the fenced execution was not cut")
	}
	var fenced bool
	for _, ex := range m.List(context.Background()) {
		if ex.ExecID == running.ExecID {
			fenced = ex.Fenced
		}
	}
	if !fenced {
		t.Error("the node does not report the execution as fenced")
	}

	// Fenced: no starts, no thaws.
	_, err := m.Start(context.Background(), nodev1.StartExecution{ExecID: "sb4-g1-d", SandboxID: "sb4", Generation: 1, Runtime: "ns"})
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("start on a fenced node: %v, want ErrUnavailable", err)
	}
	if err := m.PauseResume(context.Background(), running.ExecID, false); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("resume on a fenced node: %v, want ErrUnavailable", err)
	}
	if !fp.isPaused(running.ExecID) {
		t.Fatal("the fenced execution was thawed while the lease had ended")
	}

	// A heartbeat gets through: the node stays frozen until the control
	// plane resumes the execution.
	m.renewLease(time.Now(), time.Minute)
	time.Sleep(3 * fenceCheckEvery)
	if !fp.isPaused(running.ExecID) {
		t.Fatal("the node thawed a fenced execution by itself")
	}
	if err := m.PauseResume(context.Background(), running.ExecID, false); err != nil {
		t.Fatalf("resume after the lease was renewed: %v", err)
	}
	rec, _ := m.records.load(running.ExecID)
	if rec.Fenced || rec.Paused || fp.isPaused(running.ExecID) {
		t.Errorf("after the control plane's resume: %+v (runtime paused %v)", rec, fp.isPaused(running.ExecID))
	}
}

// TestFencePauseTakesOver: the owner's pause of a fenced execution makes it
// an ordinary paused one (thawed only by a resume, never reported fenced).
func TestFencePauseTakesOver(t *testing.T) {
	m, _ := newFencedManager(t, t.TempDir())
	rec := &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g1-a", SandboxID: "sb1", Generation: 1, Runtime: "ns"}, Paused: true, Fenced: true}
	saveRecord(t, m, rec)
	if err := m.PauseResume(context.Background(), rec.ExecID, true); err != nil {
		t.Fatal(err)
	}
	got, _ := m.records.load(rec.ExecID)
	if got.Fenced || !got.Paused {
		t.Errorf("after a pause: fenced %v paused %v, want a plain pause", got.Fenced, got.Paused)
	}
}

// TestFenceNoLease: without a lease from the control plane (none answered
// yet, or it asks for none) the node never fences.
func TestFenceNoLease(t *testing.T) {
	m, fp := newFencedManager(t, t.TempDir())
	saveRecord(t, m, &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g1-a", SandboxID: "sb1", Generation: 1, Runtime: "ns"}})
	runFence(t, m)
	m.renewLease(time.Now().Add(-time.Hour), 0)
	time.Sleep(5 * fenceCheckEvery)
	if m.leaseEnded(time.Now()) || fp.isPaused("sb1-g1-a") {
		t.Error("fenced without a lease")
	}
}

// TestFenceSurvivesRestart: a node restarted while cut off fences itself
// with the lease it last had, counted from its start.
func TestFenceSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	m, _ := newFencedManager(t, dir)
	m.renewLease(time.Now(), 200*time.Millisecond)

	m2, fp2 := newFencedManager(t, dir)
	saveRecord(t, m2, &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g1-a", SandboxID: "sb1", Generation: 1, Runtime: "ns"}})
	if m2.leaseEnded(time.Now()) {
		t.Fatal("a restarted node's lease ended at once")
	}
	runFence(t, m2)
	waitFor(t, "the restarted node fences", func() bool { return fp2.isPaused("sb1-g1-a") })
}

// TestFenceRetriesFailedFreeze: a freeze the runtime refuses is tried again.
func TestFenceRetriesFailedFreeze(t *testing.T) {
	m, fp := newFencedManager(t, t.TempDir())
	saveRecord(t, m, &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g1-a", SandboxID: "sb1", Generation: 1, Runtime: "ns"}})
	fp.mu.Lock()
	fp.fail = errors.New("freezer busy")
	fp.mu.Unlock()
	m.renewLease(time.Now().Add(-time.Second), 100*time.Millisecond)
	runFence(t, m)
	time.Sleep(3 * fenceCheckEvery)
	if got, _ := m.records.load("sb1-g1-a"); got.Fenced {
		t.Fatal("marked fenced although the freeze failed")
	}
	fp.mu.Lock()
	fp.fail = nil
	fp.mu.Unlock()
	waitFor(t, "the freeze is retried", func() bool { return fp.isPaused("sb1-g1-a") })
}

// TestHeartbeatEvery: heartbeats come at least four times per lease.
func TestHeartbeatEvery(t *testing.T) {
	m, _ := newFencedManager(t, t.TempDir())
	if got := m.heartbeatEvery(2 * time.Second); got != 2*time.Second {
		t.Errorf("no lease: %v", got)
	}
	m.renewLease(time.Now(), 10*time.Second)
	if got := m.heartbeatEvery(2 * time.Second); got != 2*time.Second {
		t.Errorf("10s lease: %v, want the configured 2s", got)
	}
	m.renewLease(time.Now(), 2*time.Second)
	if got := m.heartbeatEvery(2 * time.Second); got != 500*time.Millisecond {
		t.Errorf("2s lease: %v, want 500ms", got)
	}
}
