package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// MinIdleUnderPressure is how long a sandbox must have gone without a
// request (or a change: a resume counts) before memory pressure applies its
// idle action ahead of its idle timeout: a sandbox in use is never paused
// for pressure.
const MinIdleUnderPressure = 10 * time.Second

// RelievePressure is called for each heartbeat of a node that reports
// memory pressure (reason): it applies, ahead of its idle timeout, the idle
// action (pause or hibernate) of the node's running sandbox that has been
// idle the longest among those whose policy allows it — an idle timeout set
// whose action the next request undoes (a sandbox that would stay paused
// or stopped is left alone until its own timeout) — and idle at least
// MinIdleUnderPressure, with an event saying why. One
// sandbox per heartbeat: the node reports its pressure again after each.
// It returns the sandbox acted on ("" for none). Only hibernation returns a
// sandbox's memory to the node; a pause stops it from growing.
func (r *Reconciler) RelievePressure(ctx context.Context, node, reason string) (string, error) {
	now, steady := r.wallNow()
	if !steady {
		return "", nil
	}
	sbs, err := r.store.ListSandboxes(ctx, store.SandboxFilter{Node: node})
	if err != nil {
		return "", fmt.Errorf("node %s: memory pressure: list its sandboxes: %w", node, err)
	}
	obs, _ := r.observation(ctx, node)
	var (
		best     *sandbox.Sandbox
		bestIdle time.Duration
	)
	for _, sb := range sbs {
		if sb.State != sandbox.StateRunning || sb.Desired != sandbox.StateRunning || sb.IdleTimeout <= 0 || !sandbox.IdleWakes(sb.IdleAction) {
			continue
		}
		ex, ok := obs.executions[sb.ExecID]
		if !ok || ex.State != nodev1.ExecRunning || ex.LastActivity.IsZero() {
			continue
		}
		idle := now.Sub(later(ex.LastActivity, sb.UpdatedAt))
		if idle >= MinIdleUnderPressure && (best == nil || idle > bestIdle) {
			best, bestIdle = sb, idle
		}
	}
	if best == nil {
		return "", nil
	}
	op := sandbox.IdleOp(best.IdleAction)
	if err := best.Apply(op); err != nil {
		return "", fmt.Errorf("sandbox %s: memory pressure: %w", best.ID, err)
	}
	if err := r.fence(ctx); err != nil {
		return "", fmt.Errorf("sandbox %s: memory pressure: %w", best.ID, err)
	}
	if err := r.store.UpdateSandbox(ctx, best); err != nil {
		if errors.Is(err, errdefs.ErrConflict) {
			return "", nil // moved meanwhile: the next heartbeat looks again
		}
		return "", fmt.Errorf("sandbox %s: memory pressure: %w", best.ID, err)
	}
	r.event(ctx, best.ID, "idle", fmt.Sprintf("memory pressure on node %s (%s): no request for %s (idle timeout %s), the longest idle of the node's sandboxes with an idle timeout: %s ahead of its timeout",
		node, reason, bestIdle.Round(time.Second), best.IdleTimeout, op))
	r.Enqueue(best.ID)
	return best.ID, nil
}
