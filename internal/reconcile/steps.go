package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/guesttext"
	"github.com/spacesandbox/space/internal/sandbox"
)

// startExecution asks the sandbox's node to run its current execution. The
// node's start is idempotent per execution id, so re-driving after a crash
// finds the execution the first attempt made.
func (r *Reconciler) startExecution(ctx context.Context, sb *sandbox.Sandbox) (time.Duration, error) {
	fail := func(reason string) (time.Duration, error) {
		if err := sb.Fail(reason); err != nil {
			return 0, err
		}
		r.event(ctx, sb.ID, "failed", reason)
		after, err := r.update(ctx, sb)
		if err == nil && after == 0 {
			after = time.Millisecond // release what the node holds
		}
		return after, err
	}
	if sb.Node == "" {
		return fail("no node was chosen for the sandbox")
	}
	api, err := r.node(sb.Node)
	if err != nil {
		if time.Since(sb.UpdatedAt) > r.cfg.StartTimeout {
			return fail(fmt.Sprintf("node %s unreachable: %v", sb.Node, err))
		}
		return 500 * time.Millisecond, nil
	}
	if sb.State == sandbox.StateRestoring || sb.State == sandbox.StateRecovering {
		// A rollback or recovery replaces an execution that may still run.
		if err := r.stopPrevious(ctx, sb, api); err != nil {
			return time.Second, err
		}
	}
	if sb.StartFrom != "" {
		if after, err, ok := r.ensureLocal(ctx, sb, api); !ok {
			return after, err
		}
	}
	req, err := r.startRequest(ctx, sb)
	if err != nil {
		if time.Since(sb.UpdatedAt) > r.cfg.StartTimeout {
			return fail(err.Error())
		}
		return time.Second, err
	}
	sctx, cancel := context.WithTimeout(ctx, r.cfg.StartTimeout)
	ex, err := api.Start(sctx, req)
	if err != nil && sb.StartFrom == "" && errors.Is(err, errdefs.ErrTemplateMissing) {
		// A node that joined after the template was built gets it now,
		// then the start is tried again.
		if tpl, terr := r.store.GetTemplate(ctx, sb.Template); terr == nil {
			r.event(ctx, sb.ID, "template", fmt.Sprintf("materialising template %s on %s", tpl.Name, sb.Node))
			if _, terr := api.EnsureTemplate(sctx, tpl.Name, tpl.Source); terr == nil {
				ex, err = api.Start(sctx, req)
			} else {
				err = fmt.Errorf("%w (and making the template on the node failed: %v)", err, terr)
			}
		}
	}
	cancel()
	switch {
	case err != nil && retryLater(err) && time.Since(sb.UpdatedAt) < r.cfg.StartTimeout && ctx.Err() == nil:
		return time.Second, err
	case err != nil:
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return fail("start: " + err.Error())
	case ex.State == nodev1.ExecFailed:
		return fail("start: " + ex.Reason)
	}
	switch sb.State {
	case sandbox.StateCreating:
		failpoint.CreateAfterNodeStart.Hit()
	case sandbox.StateRestoring:
		failpoint.RestoreAfterNodeStart.Hit()
	}
	// Re-read: the sandbox may have been deleted while the node worked.
	cur, err := r.store.GetSandboxByID(ctx, sb.ID)
	if err != nil {
		return time.Second, err
	}
	if cur.State != sb.State || cur.ExecID != sb.ExecID {
		return time.Millisecond, nil
	}
	cur.State = sandbox.Settled(cur.State)
	how := ""
	if ex.Warm {
		how = ", a prepared execution from the node's warm pool"
	}
	after, err := r.updateWithEvent(ctx, cur, "state", fmt.Sprintf("running on %s (generation %d, exec %s%s)", cur.Node, cur.Generation, cur.ExecID, how))
	if err == nil && ex.StartNotReady != "" {
		// Once per Init: only the answer to the Start that ran it says so.
		// The text is the guest's; the node escaped it, and so does this.
		r.event(ctx, cur.ID, EventStartNotReady, guesttext.Escape(ex.StartNotReady))
	}
	return after, err
}

// EventStartNotReady is the type of the event that says a sandbox's
// template start command (or its ready command) was not ready when the
// sandbox started; the message says why (guest text, escaped).
const EventStartNotReady = "start_not_ready"

// retryLater reports whether a node's refusal may pass by itself: the node
// is unavailable, or has no room now (errdefs.ErrNoCapacity, which a node
// answered as unavailable before reasons crossed the wire).
func retryLater(err error) bool {
	return errors.Is(err, errdefs.ErrUnavailable) || errors.Is(err, errdefs.ErrNoCapacity)
}

// startRequest is what the node is asked to run for sb's current execution.
// It is built here and nowhere else: create, start after stop, restore after
// hibernate, rollback, fork and crash recovery all start through
// startExecution, and each carries the tenant (the gateway's credential
// scope), the sandbox's egress policy as stored now, and its interception
// CA (SetCA), which a sandbox recorded before CAs existed gets here. A
// policy changed while the node starts the execution is pushed by the API
// once the sandbox settles (server, PUT .../egress).
func (r *Reconciler) startRequest(ctx context.Context, sb *sandbox.Sandbox) (nodev1.StartExecution, error) {
	req := nodev1.StartExecution{
		ExecID: sb.ExecID, SandboxID: sb.ID, Generation: sb.Generation, ActivationID: sb.ActivationID,
		Template: sb.Template, Runtime: sb.Runtime, CPUs: sb.CPUs, MemoryMiB: sb.MemoryMiB, DiskMiB: sb.DiskMiB, Env: sb.Env,
		Snapshot: sb.StartFrom, TenantID: sb.Tenant, Egress: sandbox.EgressJSON(sb.EgressOr(r.DefaultEgress())),
		NoActivity: sb.IdleTimeout <= 0, // idle handling is what reads the activity
	}
	if f := r.ca.Load(); f != nil {
		ca, err := (*f)(ctx, sb)
		if err != nil {
			return nodev1.StartExecution{}, fmt.Errorf("sandbox %s: interception CA: %w", sb.ID, err)
		}
		req.CA = ca
	}
	return req, nil
}

// checkRunning fails a running sandbox whose node reports its execution dead
// or, after a grace period, no longer reports it at all; it deletes an expired one.
func (r *Reconciler) checkRunning(ctx context.Context, sb *sandbox.Sandbox) (time.Duration, error) {
	if now, steady := r.wallNow(); steady && sb.Expired(now) {
		if err := sb.Apply(sandbox.OpDelete); err != nil {
			return 0, err
		}
		r.event(ctx, sb.ID, "state", "timeout reached: deleting")
		after, err := r.update(ctx, sb)
		if err == nil && after == 0 {
			after = time.Millisecond
		}
		return after, err
	}
	if n, lost := r.lostNodeAtStart(ctx, sb.Node); lost {
		return r.recoverElsewhere(ctx, sb, n)
	}
	ex, reason, seen := r.deadExecution(ctx, sb)
	switch {
	case !seen:
		return 0, nil
	case reason != "":
	default:
		if ex.Fenced {
			return r.thaw(ctx, sb)
		}
		if after, done, err := r.idleCheck(ctx, sb, ex); done {
			return after, err
		}
		after, err := r.scheduleSnapshots(ctx, sb)
		if !sb.ExpiresAt.IsZero() {
			now, _ := r.wallNow()
			until := sb.ExpiresAt.Sub(now) + time.Millisecond
			if until <= time.Millisecond {
				// Past it and not deleted above: a wall-clock jump holds
				// the timeout (clock.go); look again in a while, not in a
				// loop.
				until = time.Second
			}
			if after == 0 || until < after {
				after = until
			}
		}
		return after, err
	}
	if after, err, ok := r.recoverSandbox(ctx, sb, reason); ok {
		return after, err
	}
	if err := sb.Fail(reason); err != nil {
		return 0, err
	}
	r.event(ctx, sb.ID, "failed", reason)
	after, err := r.update(ctx, sb)
	if err == nil && after == 0 {
		after = time.Millisecond
	}
	return after, err
}

// deadExecution looks at what sb's node last reported of its execution:
// reason is why it is dead (empty while it lives); seen is false while the
// node has not reported at all.
func (r *Reconciler) deadExecution(ctx context.Context, sb *sandbox.Sandbox) (ex nodev1.Execution, reason string, seen bool) {
	obs, seen := r.observationOf(ctx, sb.Node, sb.ExecID)
	ex, has := obs.executions[sb.ExecID]
	switch {
	case !seen:
	case has && ex.State == nodev1.ExecFailed && obs.at.After(sb.UpdatedAt):
		reason = ex.Reason
		if reason == "" {
			reason = fmt.Sprintf("node %s reports execution %s failed", sb.Node, sb.ExecID)
		}
	case !has && obs.at.After(sb.UpdatedAt.Add(10*time.Second)):
		reason = fmt.Sprintf("execution %s is no longer on node %s", sb.ExecID, sb.Node)
	}
	return ex, reason, seen
}

// checkPaused notices a paused sandbox whose execution died (its VMM was
// killed): it is recovered from its latest snapshot like a running one, or
// fails with the reason.
func (r *Reconciler) checkPaused(ctx context.Context, sb *sandbox.Sandbox) (time.Duration, error) {
	if n, lost := r.lostNodeAtStart(ctx, sb.Node); lost {
		return r.recoverElsewhere(ctx, sb, n)
	}
	_, reason, _ := r.deadExecution(ctx, sb)
	if reason == "" {
		return 0, nil
	}
	if after, err, ok := r.recoverSandbox(ctx, sb, reason); ok {
		return after, err
	}
	return r.failSandbox(ctx, sb, reason)
}

// deleteSandbox stops the execution and removes the row.
func (r *Reconciler) deleteSandbox(ctx context.Context, sb *sandbox.Sandbox) (time.Duration, error) {
	if err := r.deleteSnapshots(ctx, sb); err != nil {
		return time.Second, err
	}
	failpoint.DeleteAfterSnapshots.Hit()
	if _, lost := r.lostNode(ctx, sb.Node); !lost && sb.Node != "" && sb.ExecID != "" {
		// A lost node's execution is retired when it comes back.
		api, err := r.node(sb.Node)
		if err != nil {
			return time.Second, err
		}
		// A rollback or recovery that the delete overtook before its
		// start stopped the execution it replaces leaves that one
		// running: the delete stops it too, or it would run on, with no
		// record, until the orphan sweep's grace ran out.
		if err := r.stopPrevious(ctx, sb, api); err != nil {
			return time.Second, err
		}
		if err := api.Stop(ctx, sb.ExecID); err != nil {
			return time.Second, fmt.Errorf("sandbox %s: stop %s: %w", sb.ID, sb.ExecID, err)
		}
	}
	failpoint.DeleteAfterStop.Hit()
	if f := r.onDelete.Load(); f != nil {
		if err := (*f)(ctx, sb); err != nil {
			return time.Second, fmt.Errorf("sandbox %s: delete: %w", sb.ID, err)
		}
	}
	if err := r.store.DeleteSandbox(ctx, sb.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return time.Second, err
	}
	r.event(ctx, sb.ID, "state", "deleted")
	return 0, nil
}

// releaseFailed stops what a failed sandbox's node still holds, keeping the
// record (and its reason) for the user.
func (r *Reconciler) releaseFailed(ctx context.Context, sb *sandbox.Sandbox) (time.Duration, error) {
	if sb.Node == "" || sb.ExecID == "" || !r.holds(ctx, sb) {
		return 0, nil
	}
	if _, lost := r.lostNode(ctx, sb.Node); lost {
		return 0, nil // stopped when it comes back
	}
	api, err := r.node(sb.Node)
	if err != nil {
		return time.Second, err
	}
	if err := api.Stop(ctx, sb.ExecID); err != nil {
		return time.Second, err
	}
	r.forget(sb.Node, sb.ExecID)
	return 0, nil
}

// pauseResume freezes or thaws the sandbox's execution in place. A runtime
// that cannot pause puts the sandbox back where it was, with the reason in its
// events; other failures are retried until the start timeout, then fail it.
func (r *Reconciler) pauseResume(ctx context.Context, sb *sandbox.Sandbox) (time.Duration, error) {
	pause := sb.State == sandbox.StatePausing
	api, err := r.node(sb.Node)
	if err == nil {
		if pause {
			err = api.Pause(ctx, sb.ExecID)
		} else {
			err = api.Resume(ctx, sb.ExecID)
		}
	}
	op := map[bool]string{true: "pause", false: "resume"}[pause]
	switch {
	case err == nil:
		if pause {
			failpoint.PauseAfterNode.Hit()
		} else {
			failpoint.ResumeAfterNode.Hit()
		}
		sb.State = sandbox.Settled(sb.State)
		after, uerr := r.update(ctx, sb)
		if uerr == nil && after == 0 {
			r.event(ctx, sb.ID, "state", string(sb.State))
		}
		return after, uerr
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		// The runtime cannot do it: back to where the sandbox was.
		if pause {
			sb.State, sb.Desired = sandbox.StateRunning, sandbox.StateRunning
		} else {
			sb.State, sb.Desired = sandbox.StatePaused, sandbox.StatePaused
		}
		sb.Reason = op + " refused: " + err.Error()
		r.event(ctx, sb.ID, "refused", sb.Reason)
		return r.update(ctx, sb)
	case time.Since(sb.UpdatedAt) > r.cfg.StartTimeout:
		reason := op + ": " + err.Error()
		if ferr := sb.Fail(reason); ferr != nil {
			return 0, ferr
		}
		r.event(ctx, sb.ID, "failed", reason)
		return r.update(ctx, sb)
	}
	return time.Second, fmt.Errorf("sandbox %s: %s: %w", sb.ID, op, err)
}
