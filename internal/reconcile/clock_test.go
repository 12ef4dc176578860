package reconcile

import (
	"sync"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/sandbox"
)

// fakeClocks is a wall clock the test can step and a monotonic one it
// advances.
type fakeClocks struct {
	mu   sync.Mutex
	wall time.Time
	mono time.Duration
}

func (c *fakeClocks) install(r *Reconciler) {
	r.clock.wall = func() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.wall }
	r.clock.mono = func() time.Duration { c.mu.Lock(); defer c.mu.Unlock(); return c.mono }
}

// step sets the wall clock by d without time passing.
func (c *fakeClocks) step(d time.Duration) { c.mu.Lock(); c.wall = c.wall.Add(d); c.mu.Unlock() }

// pass lets d go by on both clocks.
func (c *fakeClocks) pass(d time.Duration) {
	c.mu.Lock()
	c.wall, c.mono = c.wall.Add(d), c.mono+d
	c.mu.Unlock()
}

// TestClockJumpHoldsTimeouts: a control plane whose wall clock is stepped
// forward past a sandbox's timeout and its idle timer neither deletes nor
// pauses it while the jump is fresh; once the clock has been steady for the
// settle period (the jump was a correction) the timeout takes effect. A
// jump back holds them too, and a clock that keeps jumping keeps them held.
func TestClockJumpHoldsTimeouts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	clocks := &fakeClocks{wall: time.Now().Round(0), mono: time.Hour}
	clocks.install(h.r)
	sb := h.newSandbox(sandbox.StateRunning, "ns", func(sb *sandbox.Sandbox) { sb.ExpiresAt = time.Now().Add(time.Hour) })
	idle := h.newSandbox(sandbox.StateRunning, "ns", func(sb *sandbox.Sandbox) { sb.IdleTimeout = 10 * time.Minute })
	ex := exec(idle, nodev1.ExecRunning)
	ex.LastActivity = time.Now().UTC()
	h.observe("n1", exec(sb, nodev1.ExecRunning), ex)
	h.mustPass(sb.ID)
	h.mustPass(idle.ID)
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	h.wantState(idle.ID, sandbox.StateRunning, sandbox.StateRunning)

	// The wall clock jumps two hours forward: past the timeout and the
	// idle timer, though no time passed.
	clocks.step(2 * time.Hour)
	if after := h.mustPass(sb.ID); after < time.Second/2 {
		t.Errorf("pass over a sandbox whose timeout is held: after = %v, want a second or so (not a busy loop)", after)
	}
	h.mustPass(idle.ID)
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	h.wantState(idle.ID, sandbox.StateRunning, sandbox.StateRunning)

	// It jumps back during the settle period: held for another one, past
	// the end of the first.
	clocks.pass(h.r.clock.settle / 2)
	clocks.step(-time.Minute)
	h.mustPass(sb.ID)
	clocks.pass(h.r.clock.settle/2 + time.Second)
	h.mustPass(sb.ID)
	h.mustPass(idle.ID)
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	h.wantState(idle.ID, sandbox.StateRunning, sandbox.StateRunning)

	// Steady for the settle period: the (corrected) clock is believed.
	clocks.pass(h.r.clock.settle + time.Second)
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StateDeleting, sandbox.StateDeleted)
	h.wantEvent(sb.ID, "state", "timeout reached")
	h.mustPass(idle.ID)
	h.wantState(idle.ID, sandbox.StatePausing, sandbox.StatePaused)
}
