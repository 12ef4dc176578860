package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// lifecycleWait bounds how long a lifecycle request waits for its result.
const lifecycleWait = 2 * time.Minute

// handleLifecycle starts op on the sandbox and answers once the sandbox has
// settled (or with 202 and the transitional state if that takes too long).
// An illegal transition is 409 naming the current state.
func (s *Server) handleLifecycle(op sandbox.Op) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.runLifecycle(w, r, op, nil)
	}
}

// handleRestore brings a hibernated sandbox back from object storage, on
// the node the scheduler picks or, for an admin, on the node the body names
// (to move a sandbox, or to measure a restore on another node).
func (s *Server) handleRestore(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.RestoreRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &req); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	if req.Node == "" {
		s.runLifecycle(w, r, sandbox.OpRestore, nil)
		return
	}
	if !callerOf(r.Context()).Admin {
		s.writeError(w, r, fmt.Errorf("%w: choosing the node of a restore needs an admin key", errdefs.ErrPermissionDenied))
		return
	}
	if !validNodeID(req.Node) {
		s.writeError(w, r, fmt.Errorf("%w: node %q: want 1-63 of [a-z0-9-]", errdefs.ErrInvalidArgument, clip(req.Node)))
		return
	}
	s.runLifecycle(w, r, sandbox.OpRestore, func(sb *sandbox.Sandbox) error {
		why, err := s.placeOn(r.Context(), sb, req.Node)
		if err != nil {
			return err
		}
		sb.Node = req.Node
		s.event(r.Context(), sb.ID, "scheduled", why)
		return nil
	})
}

// handleStart boots a stopped sandbox from the disk its stop kept, on the
// node that holds it.
func (s *Server) handleStart(w http.ResponseWriter, r *http.Request) {
	s.runLifecycle(w, r, sandbox.OpStart, func(sb *sandbox.Sandbox) error {
		if sb.StartFrom == "" {
			return fmt.Errorf("%w: sandbox %s has no kept disk to start from", errdefs.ErrFailedPrecondition, sb.ID)
		}
		snap, err := s.store.GetSnapshot(r.Context(), sb.Tenant, sb.StartFrom)
		if err != nil {
			return fmt.Errorf("sandbox %s: kept disk %s: %w", sb.ID, sb.StartFrom, err)
		}
		return s.startFrom(sb, snap)
	})
}

// handleRollback puts the sandbox's filesystem back to one of its snapshots:
// a new execution from it replaces the current one.
func (s *Server) handleRollback(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.RollbackRequest
	if err := decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Snapshot == "" {
		s.writeError(w, r, fmt.Errorf("%w: rollback needs a snapshot id (`space snapshot list ID` shows them)", errdefs.ErrInvalidArgument))
		return
	}
	s.runLifecycle(w, r, sandbox.OpRollback, func(sb *sandbox.Sandbox) error {
		snap, err := s.snapshotOf(r.Context(), sb, req.Snapshot)
		if err != nil {
			return err
		}
		return s.startFrom(sb, snap)
	})
}

// startFrom points sb's new execution at snap, on the node that holds it.
func (s *Server) startFrom(sb *sandbox.Sandbox, snap store.Snapshot) error {
	if snap.Node == "" {
		return fmt.Errorf("%w: snapshot %s is on no node", errdefs.ErrFailedPrecondition, snap.ID)
	}
	if snap.Runtime != sb.Runtime {
		return fmt.Errorf("%w: snapshot %s was taken on the %s runtime; the sandbox runs %s", errdefs.ErrFailedPrecondition, snap.ID, snap.Runtime, sb.Runtime)
	}
	sb.StartFrom, sb.Node = snap.ID, snap.Node
	return nil
}

// snapshotOf returns snapshot id of sb, ready for use. Another sandbox's
// snapshot is NotFound, like a missing one.
func (s *Server) snapshotOf(ctx context.Context, sb *sandbox.Sandbox, id string) (store.Snapshot, error) {
	notFound := fmt.Errorf("%w: snapshot %q of sandbox %s", errdefs.ErrNotFound, clip(id), sb.ID)
	if !sandbox.ValidSnapshotID(id) {
		return store.Snapshot{}, notFound
	}
	snap, err := s.store.GetSnapshot(ctx, sb.Tenant, id)
	if errors.Is(err, errdefs.ErrNotFound) || err == nil && snap.SandboxID != sb.ID {
		return store.Snapshot{}, notFound
	}
	if err != nil {
		return store.Snapshot{}, err
	}
	if snap.State != store.SnapshotReady {
		return store.Snapshot{}, fmt.Errorf("%w: snapshot %s is %s, not ready", errdefs.ErrFailedPrecondition, id, snap.State)
	}
	return snap, nil
}

// runLifecycle applies op (and prepare, which may refuse) to the sandbox,
// retrying on a concurrent update, then waits for it to settle.
func (s *Server) runLifecycle(w http.ResponseWriter, r *http.Request, op sandbox.Op, prepare func(*sandbox.Sandbox) error) {
	sb, err := s.sandboxFor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	wait := s.rec.Watch(sb.ID)
	defer wait.Stop()
	for {
		from := sb.State
		err = sb.Apply(op)
		if err == nil && prepare != nil {
			err = prepare(sb)
		}
		var why string
		if err == nil && sandbox.StartsExecution(from, sb.State) && sb.Node == "" {
			// A new execution that no snapshot pins to a node (a restore
			// from object storage) goes where the scheduler says.
			sb.Node, why, err = s.place(r.Context(), sb)
		}
		if err == nil {
			// Admitted under the tenant's quota if it starts holding
			// resources again (a start, a restore).
			err = s.store.UpdateSandboxWithinQuota(r.Context(), sb)
		}
		if err == nil && why != "" {
			s.event(r.Context(), sb.ID, "scheduled", why)
		}
		if !errors.Is(err, errdefs.ErrConflict) || errors.As(err, new(*sandbox.IllegalTransitionError)) {
			break
		}
		if sb, err = s.sandboxFor(r); err != nil {
			break
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	target := sandbox.Settled(sb.State)
	s.event(r.Context(), sb.ID, "state", fmt.Sprintf("%s requested", op))
	s.rec.Enqueue(sb.ID)
	sb, err = s.waitSettled(r.Context(), sb, wait)
	switch {
	case errors.Is(err, errStillWorking):
		writeJSON(w, http.StatusAccepted, s.apiOf(sb))
	case err != nil:
		s.writeError(w, r, err)
	case sb.State != target:
		// The operation was refused or failed on the way (a hibernate
		// that could not upload, a restore whose key was revoked).
		s.writeError(w, r, fmt.Errorf("%w: %s did not complete: the sandbox is %s: %s", errdefs.ErrFailedPrecondition, op, sb.State, sb.Reason))
	default:
		writeJSON(w, http.StatusOK, s.apiOf(sb))
	}
}

// errStillWorking says a wait ended before the sandbox settled.
var errStillWorking = errors.New("still working")

// waitSettled waits until sb leaves its transitional state, for at most
// lifecycleWait (then errStillWorking with the latest record).
func (s *Server) waitSettled(ctx context.Context, sb *sandbox.Sandbox, wait *reconcile.Watch) (*sandbox.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, lifecycleWait)
	defer cancel()
	for sb.State.Transitional() {
		select {
		case <-wait.C:
		case <-ctx.Done():
			return sb, errStillWorking
		}
		cur, err := s.store.GetSandboxByID(ctx, sb.ID)
		if err != nil {
			return sb, err
		}
		sb = cur
	}
	return sb, nil
}

// wake resumes a sandbox that idle handling paused or hibernated, for a
// request that needs it running, and returns it running. A sandbox still
// pausing or hibernating is waited for first. Sandboxes without idle
// handling are not woken: their caller paused them and resumes them.
func (s *Server) wake(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Sandbox, error) {
	if sb.IdleTimeout <= 0 || sb.State == sandbox.StateRunning {
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
				s.event(ctx, sb.ID, "scheduled", why)
			}
			if err == nil {
				s.event(ctx, sb.ID, "state", fmt.Sprintf("woken from %s by a request", from))
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

// handleSetTimeout sets how long the sandbox lives from now ("0": no
// timeout).
func (s *Server) handleSetTimeout(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.SetTimeoutRequest
	if err := decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	var d time.Duration
	if req.Timeout != "0" {
		var err error
		if d, err = sandbox.ParseTimeout(req.Timeout); err != nil || d == 0 {
			if err == nil {
				err = fmt.Errorf("%w: timeout is required (\"0\" removes it)", errdefs.ErrInvalidArgument)
			}
			s.writeError(w, r, err)
			return
		}
	}
	for {
		sb, err := s.sandboxFor(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if sb.State == sandbox.StateDeleting {
			s.writeError(w, r, fmt.Errorf("%w: sandbox %s is deleting", errdefs.ErrConflict, sb.ID))
			return
		}
		sb.ExpiresAt = time.Time{}
		if d > 0 {
			sb.ExpiresAt = time.Now().UTC().Add(d)
		}
		err = s.store.UpdateSandbox(r.Context(), sb)
		if errors.Is(err, errdefs.ErrConflict) {
			continue
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.rec.Enqueue(sb.ID)
		writeJSON(w, http.StatusOK, s.apiOf(sb))
		return
	}
}
