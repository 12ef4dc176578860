package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// Lifecycle applies op (pause, resume, stop, hibernate, restore from
// object storage) to sandbox id and waits for the sandbox to settle. An
// illegal transition is a *sandbox.IllegalTransitionError naming the
// current state; an operation refused or failed on the way is
// FailedPrecondition; a wait that ends first is ErrStillWorking with the
// transitional record. Start and rollback, which need a snapshot, are
// Start and Rollback; a restore on a chosen node is RestoreOn.
func (s *Sandboxes) Lifecycle(ctx context.Context, c Caller, id string, op sandbox.Op) (*sandbox.Sandbox, error) {
	return s.apply(ctx, c, id, op, nil)
}

// RestoreOn brings hibernated sandbox id back from object storage on node
// (to move a sandbox, or to measure a restore on another node). Choosing
// the node needs an admin. On a sandbox already restoring it joins that
// restore, wherever it was placed.
func (s *Sandboxes) RestoreOn(ctx context.Context, c Caller, id, node string) (*sandbox.Sandbox, error) {
	if !c.Admin {
		return nil, fmt.Errorf("%w: choosing the node of a restore needs an admin key", errdefs.ErrPermissionDenied)
	}
	return s.apply(ctx, c, id, sandbox.OpRestore, func(sb *sandbox.Sandbox) error {
		why, err := s.placeOn(ctx, sb, node)
		if err != nil {
			return err
		}
		sb.Node = node
		s.Event(ctx, sb.ID, "scheduled", why)
		return nil
	})
}

// Start boots stopped sandbox id from the disk its stop kept, on the node
// that holds it.
func (s *Sandboxes) Start(ctx context.Context, c Caller, id string) (*sandbox.Sandbox, error) {
	return s.apply(ctx, c, id, sandbox.OpStart, func(sb *sandbox.Sandbox) error {
		if sb.StartFrom == "" {
			return fmt.Errorf("%w: sandbox %s has no kept disk to start from", errdefs.ErrFailedPrecondition, sb.ID)
		}
		snap, err := s.store.GetSnapshot(ctx, sb.Tenant, sb.StartFrom)
		if err != nil {
			return fmt.Errorf("sandbox %s: kept disk %s: %w", sb.ID, sb.StartFrom, err)
		}
		return startFrom(sb, snap)
	})
}

// Rollback puts sandbox id's filesystem back to its snapshot snapID: a new
// execution from it replaces the current one.
func (s *Sandboxes) Rollback(ctx context.Context, c Caller, id, snapID string) (*sandbox.Sandbox, error) {
	if snapID == "" {
		return nil, fmt.Errorf("%w: rollback needs a snapshot id (`space snapshot list ID` shows them)", errdefs.ErrInvalidArgument)
	}
	return s.apply(ctx, c, id, sandbox.OpRollback, func(sb *sandbox.Sandbox) error {
		snap, err := s.snapshotOf(ctx, sb, snapID)
		if err != nil {
			return err
		}
		return startFrom(sb, snap)
	})
}

// startFrom points sb's new execution at snap, on the node that holds it.
func startFrom(sb *sandbox.Sandbox, snap store.Snapshot) error {
	if snap.Node == "" {
		return fmt.Errorf("%w: snapshot %s is on no node", errdefs.ErrFailedPrecondition, snap.ID)
	}
	if snap.Runtime != sb.Runtime {
		return fmt.Errorf("%w: snapshot %s was taken on the %s runtime; the sandbox runs %s", errdefs.ErrFailedPrecondition, snap.ID, snap.Runtime, sb.Runtime)
	}
	sb.StartFrom, sb.Node = snap.ID, snap.Node
	return nil
}

// apply applies op (and prepare, which may refuse) to the sandbox,
// retrying on a concurrent update, then waits for it to settle.
func (s *Sandboxes) apply(ctx context.Context, c Caller, id string, op sandbox.Op, prepare func(*sandbox.Sandbox) error) (*sandbox.Sandbox, error) {
	sb, err := s.Get(ctx, c, id)
	if err != nil {
		return nil, err
	}
	sbID := sb.ID
	wait := s.rec.Watch(sb.ID)
	defer wait.Stop()
	for {
		from := sb.State
		err = sb.Apply(op)
		// A repeat of an operation under way (a start or restore of a
		// restoring sandbox) joins it as it is: preparing it again would
		// re-pin an execution already placed and perhaps starting, or
		// refuse it for a snapshot the restore is bringing to its node
		// (TestConcurrentLifecycle: start ‖ restore of a hibernated sandbox).
		repeat := from == sb.State && from.Transitional()
		if err == nil && prepare != nil && !repeat {
			err = prepare(sb)
		}
		var why string
		if err == nil && sandbox.StartsExecution(from, sb.State) && sb.Node == "" {
			// A new execution that no snapshot pins to a node (a restore
			// from object storage) goes where the scheduler says.
			sb.Node, why, err = s.place(ctx, sb)
		}
		if err == nil {
			// Admitted under the tenant's quota if it starts holding
			// resources again (a start, a restore).
			err = s.store.UpdateSandboxWithinQuota(ctx, sb)
		}
		if err == nil && why != "" {
			s.Event(ctx, sb.ID, "scheduled", why)
		}
		if !errors.Is(err, errdefs.ErrConflict) || errors.As(err, new(*sandbox.IllegalTransitionError)) {
			break
		}
		if sb, err = s.Get(ctx, c, id); err != nil {
			break
		}
	}
	if err != nil {
		s.refused(ctx, sbID, op, err)
		return nil, err
	}
	target := sandbox.Settled(sb.State)
	s.Event(ctx, sb.ID, "state", fmt.Sprintf("%s requested", op))
	s.rec.Enqueue(sb.ID)
	sb, err = s.WaitSettled(ctx, sb, wait)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		// A delete overtook the operation (F-7): the loser is told so.
		return nil, fmt.Errorf("%w: sandbox %s was deleted before the %s completed", errdefs.ErrNotFound, id, op)
	case err != nil:
		return sb, err
	case sb.State != target:
		// The operation was refused or failed on the way (a hibernate
		// that could not upload, a restore whose key was revoked).
		return nil, fmt.Errorf("%w: %s did not complete: the sandbox is %s: %s", errdefs.ErrFailedPrecondition, op, sb.State, sb.Reason)
	}
	return sb, nil
}

// WaitSettled waits until sb leaves its transitional state, for at most
// two minutes (then ErrStillWorking with the latest record). wait is the
// reconciler's watch of sb, taken before the change waited for was made.
func (s *Sandboxes) WaitSettled(ctx context.Context, sb *sandbox.Sandbox, wait *reconcile.Watch) (*sandbox.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, lifecycleWait)
	defer cancel()
	for sb.State.Transitional() {
		select {
		case <-wait.C:
		case <-ctx.Done():
			return sb, ErrStillWorking
		}
		cur, err := s.store.GetSandboxByID(ctx, sb.ID)
		if err != nil {
			return sb, err
		}
		sb = cur
	}
	return sb, nil
}

// LifecycleWait is how long an operation waits for the sandbox to settle
// before ErrStillWorking.
const LifecycleWait = lifecycleWait

// Wake resumes a sandbox that idle handling paused or hibernated, for a
// request that needs it running, and returns it running. A sandbox still
// pausing or hibernating is waited for first. Sandboxes without idle
// handling are not woken: their caller paused them and resumes them; nor
// are those whose idle action requests do not undo (sandbox.IdleWakes:
// E2B's onTimeout "pause" without autoResume).
func (s *Sandboxes) Wake(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Sandbox, error) {
	if sb.IdleTimeout <= 0 || !sandbox.IdleWakes(sb.IdleAction) || sb.State == sandbox.StateRunning {
		return sb, nil
	}
	wait := s.rec.Watch(sb.ID)
	defer wait.Stop()
	ctx, cancel := context.WithTimeout(ctx, lifecycleWait)
	defer cancel()
	for {
		switch sb.State {
		case sandbox.StateRunning:
			return sb, nil
		case sandbox.StatePaused, sandbox.StateHibernated:
			from := sb.State
			err := sb.Apply(sandbox.OpResume)
			var why string
			if err == nil && sandbox.StartsExecution(from, sb.State) {
				sb.Node, why, err = s.place(ctx, sb)
			}
			if err == nil {
				err = s.store.UpdateSandboxWithinQuota(ctx, sb)
			}
			if err == nil && why != "" {
				s.Event(ctx, sb.ID, "scheduled", why)
			}
			if err == nil {
				s.Event(ctx, sb.ID, "state", fmt.Sprintf("woken from %s by a request", from))
				s.rec.Enqueue(sb.ID)
			} else if !errors.Is(err, errdefs.ErrConflict) || errors.As(err, new(*sandbox.IllegalTransitionError)) {
				return nil, err
			}
		case sandbox.StatePausing, sandbox.StateHibernating, sandbox.StateResuming, sandbox.StateRestoring, sandbox.StateRecovering:
			// Settling: wait below.
		default:
			return nil, fmt.Errorf("%w: sandbox %s is %s, not running", errdefs.ErrConflict, sb.ID, sb.State)
		}
		select {
		case <-wait.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: sandbox %s is still %s; retry", errdefs.ErrUnavailable, sb.ID, sb.State)
		}
		cur, err := s.store.GetSandboxByID(ctx, sb.ID)
		if err != nil {
			return nil, err
		}
		sb = cur
	}
}

// SetTimeout sets how long sandbox id lives from now (0: no timeout).
func (s *Sandboxes) SetTimeout(ctx context.Context, c Caller, id string, d time.Duration) (*sandbox.Sandbox, error) {
	for {
		sb, err := s.Get(ctx, c, id)
		if err != nil {
			return nil, err
		}
		if sb.State == sandbox.StateDeleting {
			return nil, fmt.Errorf("%w: sandbox %s is deleting", errdefs.ErrConflict, sb.ID)
		}
		sb.ExpiresAt = time.Time{}
		if d > 0 {
			sb.ExpiresAt = time.Now().UTC().Add(d)
		}
		err = s.store.UpdateSandbox(ctx, sb)
		if errors.Is(err, errdefs.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		s.rec.Enqueue(sb.ID)
		return sb, nil
	}
}

// deleteWait bounds how long a delete waits for the execution to be gone.
const deleteWait = 2 * time.Minute

// Delete marks sandbox id deleting and waits until its execution is gone;
// ErrStillWorking when that takes too long (the reconciler finishes the
// deletion; the sandbox is already unusable and reported as deleting).
func (s *Sandboxes) Delete(ctx context.Context, c Caller, id string) error {
	sb, err := s.Get(ctx, c, id)
	if err != nil {
		return err
	}
	sbID := sb.ID
	wait := s.rec.Watch(sb.ID)
	defer wait.Stop()
	for {
		err = sb.Apply(sandbox.OpDelete)
		if err == nil {
			err = s.store.UpdateSandbox(ctx, sb)
		}
		if !errors.Is(err, errdefs.ErrConflict) || errors.As(err, new(*sandbox.IllegalTransitionError)) {
			break
		}
		// Someone else updated the row: re-read and try again.
		if sb, err = s.Get(ctx, c, id); err != nil {
			return err
		}
	}
	if err != nil {
		s.refused(ctx, sbID, sandbox.OpDelete, err)
		return err
	}
	s.Event(ctx, sb.ID, "state", "delete requested")
	s.rec.Enqueue(sb.ID)
	ctx, cancel := context.WithTimeout(ctx, deleteWait)
	defer cancel()
	for {
		_, err := s.store.GetSandboxByID(ctx, sb.ID)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		select {
		case <-wait.C:
		case <-ctx.Done():
			return ErrStillWorking
		}
	}
}
