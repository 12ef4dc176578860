package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// A draining node (store.NodeDraining, set by an admin) takes no new
// sandboxes (the scheduler places only on ready nodes), and each pass over
// a running or paused sandbox on it moves the sandbox to another node: the
// existing hibernate path (full snapshot — disk only for ns — uploaded to
// object storage and verified, execution released), then the existing
// restore path on the node the scheduler picks (a new execution,
// generation+1). A moved paused sandbox is paused again on its new node.
//
// The move is level-based like everything else: the sandbox's Desired
// state carries it across passes. A drain starts a hibernation with
// Desired set to where the sandbox should end up (running or paused)
// instead of hibernated; a hibernated sandbox whose Desired is not
// hibernated is one a drain is moving, and a running sandbox that should be
// paused is one a drain moved. Nothing else sets these combinations
// (sandbox.Apply always sets Desired to where the new state settles).
//
// A sandbox that cannot move stays where it is safe, with the reason in its
// events: without an object store it stays on the draining node (it cannot
// be hibernated); when no other node can take it, it stays hibernated in
// object storage (a later restore places it); a refused hibernation leaves
// it on the node as it was (a running one is resumed: refuseHibernate
// leaves it paused) and the drain retries after drainRetry. Stopped
// sandboxes are not moved: their kept disk lives on the node, and the node
// list names them.

// drainRetry is how long a drain waits before it tries again to move a
// sandbox whose previous hibernation was refused.
const drainRetry = time.Minute

// drainStep makes the drain's step for sb, if it has one; done is false
// when the pass goes on as usual.
func (r *Reconciler) drainStep(ctx context.Context, sb *sandbox.Sandbox) (after time.Duration, done bool, err error) {
	moving := sb.Desired == sandbox.StateRunning || sb.Desired == sandbox.StatePaused
	switch {
	case sb.State == sandbox.StateHibernating && moving:
		end := sb.Desired
		after, err = r.hibernateSandbox(ctx, sb)
		if err == nil && end == sandbox.StateRunning {
			return r.resumeRefused(ctx, sb.ID, sb.Generation)
		}
		if err == nil && after == 0 {
			after = time.Millisecond // restore at once
		}
		return after, true, err
	case sb.State == sandbox.StateHibernated && moving:
		after, err = r.restoreDrained(ctx, sb)
		return after, true, err
	case sb.State == sandbox.StateRunning && sb.Desired == sandbox.StatePaused:
		if err := sb.Apply(sandbox.OpPause); err != nil {
			return 0, true, err
		}
		r.event(ctx, sb.ID, "state", "pausing again: the sandbox was paused before its node was drained")
		after, err = r.update(ctx, sb)
		if err == nil && after == 0 {
			after = time.Millisecond
		}
		return after, true, err
	case sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused:
		if n, ok := viewedNode(ctx, sb.Node); ok && n.State != store.NodeDraining {
			return 0, false, nil // as the resync read it (unsettled.go)
		}
		if !r.draining(ctx, sb.Node) {
			return 0, false, nil
		}
		return r.startDrain(ctx, sb)
	}
	return 0, false, nil
}

// draining reports whether node id is draining.
func (r *Reconciler) draining(ctx context.Context, id string) bool {
	if id == "" {
		return false
	}
	n, err := r.store.GetNode(ctx, id)
	return err == nil && n.State == store.NodeDraining
}

// startDrain begins moving sb off its draining node: a hibernation that
// ends where the sandbox is now (running or paused).
func (r *Reconciler) startDrain(ctx context.Context, sb *sandbox.Sandbox) (time.Duration, bool, error) {
	from := sb.Node
	if r.cfg.Objects == nil || r.cfg.TenantKey == nil {
		reason := fmt.Sprintf("node %s is draining: the sandbox cannot move: no object store is configured to hibernate it into", from)
		if sb.Reason == reason {
			return 0, false, nil // said once; the pass goes on
		}
		sb.Reason = reason
		r.event(ctx, sb.ID, "refused", reason+"; it stays on "+from)
		after, err := r.update(ctx, sb)
		return after, true, err
	}
	if sb.Reason != "" && time.Since(sb.UpdatedAt) < drainRetry {
		// A refused hibernation (or other trouble) was just recorded:
		// retry later rather than on every pass.
		return 0, false, nil
	}
	end := sb.State
	if err := sb.Apply(sandbox.OpHibernate); err != nil {
		return 0, true, err
	}
	sb.Desired = end
	sb.Reason = fmt.Sprintf("node %s is draining", from)
	r.event(ctx, sb.ID, "draining", fmt.Sprintf("node %s is draining: hibernating the %s sandbox to move it to another node", from, end))
	after, err := r.update(ctx, sb)
	if err == nil && after == 0 {
		after = time.Millisecond
	}
	return after, true, err
}

// restoreDrained restores sb, hibernated by a drain, on the node the
// scheduler picks; with none, it stays hibernated with the reason.
func (r *Reconciler) restoreDrained(ctx context.Context, sb *sandbox.Sandbox) (time.Duration, error) {
	why := sb.Reason
	if why == "" {
		why = "its node is draining"
	}
	end := sb.Desired
	target, placed, err := r.placeRecovery(ctx, sb)
	if err != nil {
		reason := fmt.Sprintf("%s: no other node can take the sandbox (%v); it stays hibernated in object storage: restore it once a node is ready", why, err)
		sb.Desired, sb.Reason = sandbox.StateHibernated, reason
		r.event(ctx, sb.ID, "refused", reason)
		return r.update(ctx, sb)
	}
	if err := sb.Apply(sandbox.OpRestore); err != nil {
		return 0, err
	}
	sb.Node = target
	if end == sandbox.StatePaused {
		sb.Desired = sandbox.StatePaused
	}
	r.event(ctx, sb.ID, "draining", fmt.Sprintf("%s: moving to %s (%s); generation %d", why, target, placed, sb.Generation))
	after, err := r.update(ctx, sb)
	if err == nil && after == 0 {
		after = time.Millisecond
	}
	return after, err
}

// resumeRefused resumes a sandbox that was running before a drain whose
// hibernation was refused (refuseHibernate leaves it paused on its node):
// a drain that cannot move a sandbox must not stop it either. The refusal's
// reason stays on the record, so the drain retries after drainRetry.
func (r *Reconciler) resumeRefused(ctx context.Context, id string, gen uint64) (time.Duration, bool, error) {
	sb, err := r.store.GetSandboxByID(ctx, id)
	if err != nil {
		return time.Second, true, err
	}
	if sb.Generation != gen || sb.State != sandbox.StatePaused || sb.Desired != sandbox.StatePaused {
		return time.Millisecond, true, nil // hibernated (or moved on): the next pass goes on
	}
	reason := sb.Reason
	if err := sb.Apply(sandbox.OpResume); err != nil {
		return 0, true, err
	}
	sb.Reason = reason
	r.event(ctx, sb.ID, "draining", fmt.Sprintf("the drain of %s could not move the sandbox: resuming it there; the drain retries in %s", sb.Node, drainRetry))
	after, err := r.update(ctx, sb)
	if err == nil && after == 0 {
		after = time.Millisecond
	}
	return after, true, err
}
