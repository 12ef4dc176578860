package capability

import "time"

// steadyClock is wall time that never goes back: it follows the wall clock
// while the wall clock moves forward, and when the wall clock is set back it
// carries on from the latest time it gave, at the rate of the monotonic
// clock, until the wall clock passes it again.
//
// The keyring measures ActivationDelay and the grace of a retired key with
// it (catalogue F-8). A wall clock set back by an hour must not make the
// signing key look not yet active (no key would sign), bring back a retired
// one, or hold a rotation for an hour; the durations stay real durations.
// A forward jump is followed: it can only shorten a wait, and receivers
// already judge capabilities by their own wall clock.
//
// steadyClock is not safe for concurrent use; the keyring's mutex guards it.
type steadyClock struct {
	wall func() time.Time
	// elapsed is monotonic time since any fixed origin.
	elapsed func() time.Duration

	// last is the latest time given, lastElapsed the monotonic reading then.
	last        time.Time
	lastElapsed time.Duration
}

// start makes floor the earliest time the clock gives: the latest time a
// keyring file records, so a restart with the wall clock behind resumes from
// where the keyring was.
func (c *steadyClock) start(floor time.Time) {
	c.last, c.lastElapsed = floor.UTC(), c.elapsed()
}

// now returns the clock's time, never earlier than any it returned before.
func (c *steadyClock) now() time.Time {
	e := c.elapsed()
	t := c.wall().UTC().Round(0)
	if !c.last.IsZero() {
		if carried := c.last.Add(max(e-c.lastElapsed, 0)); carried.After(t) {
			t = carried
		}
	}
	c.last, c.lastElapsed = t, e
	return t
}
