package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// ForkParams is what a fork asks for.
type ForkParams struct {
	// Name is the child's name ("": none).
	Name string
	// Snapshot is the parent's snapshot the child starts from; "": one
	// taken now (full on vm, so the child continues the parent's
	// processes; disk on ns).
	Snapshot string
	// Key, when set, derives the child's id from the parent and the key
	// (as a create's is): a retry after a control plane died mid-fork
	// finds the child the first attempt recorded instead of forking again.
	Key string
	// IdleTimeout and IdleAction, when IdleTimeout is set, are the child's
	// idle handling (sandbox.Sandbox), which then has no timeout: set here
	// and not after, as the child's first execution must be started with
	// activity tracking for them to work.
	IdleTimeout time.Duration
	IdleAction  string
}

// Fork starts a new sandbox from one of sandbox parentID's snapshots, or
// from a snapshot taken now. The parent keeps running. The child is placed
// on the node that holds the snapshot, gets its own identity and its own
// CA, and is returned once it settles (ErrStillWorking with it when that
// takes too long; FailedPrecondition when it failed to start).
func (s *Sandboxes) Fork(ctx context.Context, c Caller, parentID string, req ForkParams) (*sandbox.Sandbox, error) {
	if err := sandbox.ValidateName(req.Name); err != nil {
		return nil, err
	}
	parent, err := s.Get(ctx, c, parentID)
	if err != nil {
		return nil, err
	}
	var childID string
	if req.Key != "" {
		childID = sandbox.DerivedID("fork", parent.Tenant, parent.ID, req.Key)
		if prev, err := s.store.GetSandboxByID(ctx, childID); err == nil {
			return s.earlierFork(ctx, prev, req)
		}
	}
	// Refuse before taking a snapshot the fork could not run from.
	if err := s.quotaCheck(ctx, parent.Tenant, store.UsageOf(parent)); err != nil {
		return nil, err
	}
	snap, err := s.forkSnapshot(ctx, parent, req.Snapshot)
	if err != nil {
		return nil, err
	}
	failpoint.ForkAfterSnapshot.Hit()
	child, err := s.newFork(parent, snap, req.Name, childID)
	if err != nil {
		return nil, err
	}
	if req.IdleTimeout > 0 {
		child.IdleTimeout, child.IdleAction, child.ExpiresAt = req.IdleTimeout, req.IdleAction, time.Time{}
	}
	wait := s.rec.Watch(child.ID)
	defer wait.Stop()
	if err := s.store.CreateSandboxWithinQuota(ctx, child); err != nil {
		if childID != "" && errors.Is(err, errdefs.ErrConflict) {
			// Another attempt with this key recorded it meanwhile (the
			// snapshot this one took stays with the parent).
			if prev, gerr := s.store.GetSandboxByID(ctx, childID); gerr == nil {
				return s.earlierFork(ctx, prev, req)
			}
		}
		return nil, err
	}
	failpoint.ForkAfterRecord.Hit()
	s.Event(ctx, child.ID, "scheduled", fmt.Sprintf("fork of %s from snapshot %s on %s", parent.ID, snap.ID, snap.Node))
	s.Event(ctx, parent.ID, "fork", fmt.Sprintf("forked into %s from snapshot %s", child.ID, snap.ID))
	s.rec.Enqueue(child.ID)
	return s.settledFork(ctx, child, wait)
}

// forkSnapshot is the snapshot a fork of parent starts from: id, or one
// taken now when id is "".
func (s *Sandboxes) forkSnapshot(ctx context.Context, parent *sandbox.Sandbox, id string) (store.Snapshot, error) {
	if id != "" {
		return s.snapshotOf(ctx, parent, id)
	}
	kind := store.SnapshotDisk
	if parent.Runtime == "vm" {
		kind = store.SnapshotFull
	}
	snap, err := s.snapshot(ctx, parent, kind, TierFork, "")
	if errors.Is(err, ErrStillWorking) {
		// Not the fork's ErrStillWorking: there is no child yet.
		err = fmt.Errorf("%w: the fork's snapshot %s is still being taken; retry", errdefs.ErrUnavailable, snap.ID)
	}
	return snap, err
}

// newFork is the child sandbox of a fork of parent from snap, not yet
// recorded; id "" gives it a new id.
func (s *Sandboxes) newFork(parent *sandbox.Sandbox, snap store.Snapshot, name, id string) (*sandbox.Sandbox, error) {
	child := sandbox.New(parent.Tenant, sandbox.Spec{
		Name: name, Template: parent.Template, Runtime: parent.Runtime, CPUs: parent.CPUs,
		MemoryMiB: parent.MemoryMiB, DiskMiB: parent.DiskMiB, Env: parent.Env, Metadata: parent.Metadata,
		// The fork inherits the parent's policy, as its own from now on.
		Egress:  parent.EgressOr(s.cfg.DefaultEgress),
		Project: parent.Project,
	}, time.Now())
	// The fork is another sandbox: it trusts a CA of its own, never its
	// parent's (whose key would let one mint certificates the other trusts).
	if err := s.newCA(child); err != nil {
		return nil, err
	}
	if id != "" {
		child.SetID(id)
	}
	if !parent.ExpiresAt.IsZero() {
		child.ExpiresAt = child.CreatedAt.Add(parent.ExpiresAt.Sub(parent.CreatedAt))
	}
	if err := startFrom(child, snap); err != nil {
		return nil, err
	}
	if snap.Kind == store.SnapshotFull {
		// A full snapshot restores only at the size it was taken.
		child.CPUs, child.MemoryMiB = snap.CPUs, snap.MemoryMiB
	}
	return child, nil
}

// earlierFork answers a fork retried with the key of an earlier attempt
// that recorded the child and did not answer: that child once it settles,
// if the retry asks for the same fork.
func (s *Sandboxes) earlierFork(ctx context.Context, prev *sandbox.Sandbox, req ForkParams) (*sandbox.Sandbox, error) {
	if prev.Name != req.Name {
		return nil, fmt.Errorf("%w: Idempotency-Key was used for another request", errdefs.ErrConflict)
	}
	wait := s.rec.Watch(prev.ID)
	defer wait.Stop()
	s.rec.Enqueue(prev.ID)
	return s.settledFork(ctx, prev, wait)
}

// settledFork waits for a new fork to settle.
func (s *Sandboxes) settledFork(ctx context.Context, child *sandbox.Sandbox, wait *reconcile.Watch) (*sandbox.Sandbox, error) {
	child, err := s.WaitSettled(ctx, child, wait)
	switch {
	case err != nil:
		return child, err
	case child.State == sandbox.StateFailed:
		return nil, fmt.Errorf("%w: fork %s failed to start: %s", errdefs.ErrFailedPrecondition, child.ID, child.Reason)
	}
	return child, nil
}
