package reconcile

import (
	"sync"
	"time"
)

// Wall-clock jumps. A sandbox's timeout, its idle timer and its snapshot
// schedule are wall-clock times (recorded in the store, compared across
// replicas and nodes), so a control plane whose clock is stepped — forward
// by an NTP fix after a boot without a battery, back by an operator — would
// act on all of them at once: a jump of a day forward deletes every sandbox
// with a timeout and hibernates every idle one. The reconciler compares the
// wall clock's advance with the monotonic clock's at every such decision;
// when they disagree by more than jumpTolerance, the decisions that depend
// on wall time are held until the clocks have agreed for jumpSettle of
// monotonic time (a jump that was a correction then takes effect; one that
// keeps happening keeps them held). Leases and the fence run on the
// monotonic clock and are not affected.
const (
	jumpTolerance = 2 * time.Second
	jumpSettle    = time.Minute
)

// wallWatch notices wall-clock jumps.
type wallWatch struct {
	mu        sync.Mutex
	wall      func() time.Time     // the wall clock
	mono      func() time.Duration // a monotonic clock
	settle    time.Duration
	seen      bool
	lastWall  time.Time
	lastMono  time.Duration
	heldUntil time.Duration // on mono; 0: not held
}

// newWallWatch watches the process's clocks.
func newWallWatch() *wallWatch {
	start := time.Now()
	return &wallWatch{
		wall:   func() time.Time { return time.Now().Round(0) },
		mono:   func() time.Duration { return time.Since(start) },
		settle: jumpSettle,
	}
}

// now returns the wall clock's time and whether decisions that depend on it
// may be taken: false from a jump until the clocks have agreed for the
// settle period. jumped reports a jump seen by this call (drift is its
// size), for the caller to log.
func (w *wallWatch) now() (now time.Time, steady, jumped bool, drift time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wall, mono := w.wall(), w.mono()
	if w.seen {
		drift = wall.Sub(w.lastWall) - (mono - w.lastMono)
		if drift > jumpTolerance || drift < -jumpTolerance {
			w.heldUntil, jumped = mono+w.settle, true
		}
	}
	w.seen, w.lastWall, w.lastMono = true, wall, mono
	return wall, mono >= w.heldUntil, jumped, drift
}

// wallNow is the wall clock for a decision that depends on it, and whether
// that decision may be taken now (see wallWatch).
func (r *Reconciler) wallNow() (time.Time, bool) {
	now, steady, jumped, drift := r.clock.now()
	if jumped {
		r.log.Warn("the wall clock jumped; sandbox timeouts, idle timers and snapshot schedules wait until it is steady",
			"jump", drift.Round(time.Millisecond), "settle", r.clock.settle)
	}
	return now, steady
}
