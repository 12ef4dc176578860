package reconcile

import (
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/sandbox"
)

// TestRelievePressurePausesTheLongestIdle: under memory pressure, each call
// (one per heartbeat) applies the idle action of the node's longest-idle
// running sandbox that has an idle timeout, ahead of that timeout, with an
// event naming the pressure; a sandbox without an idle timeout, or in use,
// is left alone.
func TestRelievePressurePausesTheLongestIdle(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	idleFor := func(action string, timeout, idle time.Duration) (*sandbox.Sandbox, nodev1.Execution) {
		sb := h.newSandbox(sandbox.StateRunning, "ns", func(sb *sandbox.Sandbox) { sb.IdleTimeout, sb.IdleAction = timeout, action })
		h.st.backdate(sb.ID, 3*time.Hour)
		ex := exec(sb, nodev1.ExecRunning)
		ex.LastActivity = time.Now().Add(-idle)
		return sb, ex
	}
	paused, ex1 := idleFor(sandbox.IdlePause, 24*time.Hour, time.Hour)
	hibernated, ex2 := idleFor(sandbox.IdleHibernate, 24*time.Hour, 2*time.Hour)
	noPolicy, ex3 := idleFor("", 0, 3*time.Hour)
	busy, ex4 := idleFor(sandbox.IdlePause, 24*time.Hour, 2*time.Second)
	// Idle the longest, but its action is not undone by the next request
	// (E2B's onTimeout "pause" without autoResume): left to its timeout.
	held, ex5 := idleFor(sandbox.IdlePauseHeld, 24*time.Hour, 3*time.Hour)
	stops, ex6 := idleFor(sandbox.IdleStop, 24*time.Hour, 3*time.Hour)
	h.observe("n1", ex1, ex2, ex3, ex4, ex5, ex6)

	const reason = "MemAvailable 500 MiB of 8.0 GiB (6.1%) below 10%"
	for _, want := range []struct {
		sb    *sandbox.Sandbox
		state sandbox.State
	}{{hibernated, sandbox.StateHibernating}, {paused, sandbox.StatePausing}} {
		got, err := h.r.RelievePressure(h.ctx, "n1", reason)
		if err != nil || got != want.sb.ID {
			t.Fatalf("RelievePressure = %q, %v; want %s (the longest idle left)", got, err, want.sb.ID)
		}
		h.wantState(want.sb.ID, want.state, sandbox.Settled(want.state))
		h.wantEvent(want.sb.ID, "idle", "memory pressure on node n1 ("+reason+"): no request for ")
	}
	if got, err := h.r.RelievePressure(h.ctx, "n1", reason); err != nil || got != "" {
		t.Fatalf("RelievePressure with only a sandbox without idle timeout and one in use left = %q, %v; want none", got, err)
	}
	for _, sb := range []*sandbox.Sandbox{noPolicy, busy, held, stops} {
		h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	}
	if got, err := h.r.RelievePressure(h.ctx, "n2", reason); err != nil || got != "" {
		t.Fatalf("RelievePressure on a node without sandboxes = %q, %v", got, err)
	}
}
