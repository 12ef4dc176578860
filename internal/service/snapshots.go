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

// Snapshot tiers: why a snapshot was taken.
const (
	// TierManual is a snapshot taken on request.
	TierManual = "manual"
	// TierFork is the snapshot a fork took to start from.
	TierFork = "fork"
)

// ListSnapshots returns sandbox id's snapshots.
func (s *Sandboxes) ListSnapshots(ctx context.Context, c Caller, id string) ([]store.Snapshot, error) {
	sb, err := s.Get(ctx, c, id)
	if err != nil {
		return nil, err
	}
	return s.store.ListSnapshots(ctx, store.SnapshotFilter{SandboxID: sb.ID, Tenant: sb.Tenant})
}

// TenantSnapshots returns c's tenant's snapshots that f selects (its
// Tenant is c's, whatever f says).
func (s *Sandboxes) TenantSnapshots(ctx context.Context, c Caller, f store.SnapshotFilter) ([]store.Snapshot, error) {
	f.Tenant = c.Tenant
	return s.store.ListSnapshots(ctx, f)
}

// GetSnapshot returns snapshot id of c's tenant, whichever its sandbox.
func (s *Sandboxes) GetSnapshot(ctx context.Context, c Caller, id string) (store.Snapshot, error) {
	notFound := fmt.Errorf("%w: snapshot %q", errdefs.ErrNotFound, Clip(id))
	if !sandbox.ValidSnapshotID(id) {
		return store.Snapshot{}, notFound
	}
	snap, err := s.store.GetSnapshot(ctx, c.Tenant, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return store.Snapshot{}, notFound
	}
	return snap, err
}

// TakeSnapshot takes a snapshot of kind ("": disk) of running or paused
// sandbox id and waits for the outcome: the ready snapshot, an error with
// the reason it failed, or ErrStillWorking with the snapshot still being
// taken.
func (s *Sandboxes) TakeSnapshot(ctx context.Context, c Caller, id string, kind store.SnapshotKind, tier string) (store.Snapshot, error) {
	return s.TakeSnapshotWithKey(ctx, c, id, kind, tier, "")
}

// TakeSnapshotWithKey is TakeSnapshot with the request's Idempotency-Key
// ("": none): the snapshot's id is derived from the sandbox and the key, so
// a retry whose first attempt recorded the snapshot and never answered (a
// server that died, or a connection reset after which Go's HTTP client
// re-sends a POST that carries an Idempotency-Key) waits on that snapshot
// instead of taking a second one.
func (s *Sandboxes) TakeSnapshotWithKey(ctx context.Context, c Caller, id string, kind store.SnapshotKind, tier, key string) (store.Snapshot, error) {
	sb, err := s.Get(ctx, c, id)
	if err != nil {
		return store.Snapshot{}, err
	}
	if kind == "" {
		kind = store.SnapshotDisk
	}
	snapID := ""
	if key != "" {
		snapID = KeyedSnapshotID(sb.Tenant, sb.ID, key)
	}
	return s.snapshot(ctx, sb, kind, tier, snapID)
}

// KeyedSnapshotID is the id of the snapshot of sandbox id that a request
// with Idempotency-Key key takes.
func KeyedSnapshotID(tenant, id, key string) string {
	return "sn-" + sandbox.DerivedID("snapshot", tenant, id, key)
}

// earlierSnapshot answers a snapshot request retried with the key of an
// earlier attempt that recorded prev: prev's outcome, when it is a
// snapshot of the same sandbox and kind (else the key was used for another
// request).
func (s *Sandboxes) earlierSnapshot(ctx context.Context, sb *sandbox.Sandbox, prev store.Snapshot, kind store.SnapshotKind) (store.Snapshot, error) {
	if prev.SandboxID != sb.ID || prev.Kind != kind {
		return store.Snapshot{}, fmt.Errorf("%w: Idempotency-Key was used for another request", errdefs.ErrConflict)
	}
	wait := s.rec.Watch(sb.ID)
	defer wait.Stop()
	s.rec.Enqueue(sb.ID)
	return s.settledSnapshot(ctx, sb, prev, wait)
}

// snapshot records a new snapshot of sb (id "": a new id) for the
// reconciler to take and waits for the outcome (see TakeSnapshot).
func (s *Sandboxes) snapshot(ctx context.Context, sb *sandbox.Sandbox, kind store.SnapshotKind, tier, id string) (store.Snapshot, error) {
	if id != "" {
		if prev, err := s.store.GetSnapshot(ctx, sb.Tenant, id); err == nil {
			return s.earlierSnapshot(ctx, sb, prev, kind)
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return store.Snapshot{}, err
		}
	}
	if kind != store.SnapshotDisk && kind != store.SnapshotFull {
		return store.Snapshot{}, fmt.Errorf("%w: snapshot kind %q: want disk or full", errdefs.ErrInvalidArgument, Clip(string(kind)))
	}
	if kind == store.SnapshotFull && sb.Runtime != "vm" {
		return store.Snapshot{}, fmt.Errorf("%w: the %s runtime cannot save memory (it shares the host kernel): take a disk snapshot", errdefs.ErrFailedPrecondition, sb.Runtime)
	}
	if sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused {
		return store.Snapshot{}, fmt.Errorf("%w: cannot snapshot a sandbox that is %s (it must be running or paused)", errdefs.ErrConflict, sb.State)
	}
	if id == "" {
		id = sandbox.NewSnapshotID()
	}
	snap := store.Snapshot{
		ID: id, SandboxID: sb.ID, Tenant: sb.Tenant, Kind: kind, Tier: tier,
		State: store.SnapshotCreating, Node: sb.Node, Runtime: sb.Runtime, Template: sb.Template,
		CPUs: sb.CPUs, MemoryMiB: sb.MemoryMiB, Generation: sb.Generation, CreatedAt: time.Now().UTC(),
	}
	wait := s.rec.Watch(sb.ID)
	defer wait.Stop()
	if err := s.store.CreateSnapshot(ctx, snap); err != nil {
		if errors.Is(err, errdefs.ErrConflict) {
			// Another attempt with this key recorded it meanwhile.
			if prev, gerr := s.store.GetSnapshot(ctx, sb.Tenant, snap.ID); gerr == nil {
				return s.earlierSnapshot(ctx, sb, prev, kind)
			}
		}
		return snap, err
	}
	s.rec.Enqueue(sb.ID)
	return s.settledSnapshot(ctx, sb, snap, wait)
}

// settledSnapshot waits until snap is ready or failed (ErrStillWorking when
// that takes longer than a lifecycle wait).
func (s *Sandboxes) settledSnapshot(ctx context.Context, sb *sandbox.Sandbox, snap store.Snapshot, wait *reconcile.Watch) (store.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, lifecycleWait)
	defer cancel()
	for {
		cur, err := s.store.GetSnapshot(ctx, sb.Tenant, snap.ID)
		if errors.Is(err, errdefs.ErrNotFound) {
			// Rows being taken are removed only with their sandbox (F-7:
			// delete ‖ snapshot).
			return snap, fmt.Errorf("%w: snapshot %s is gone: sandbox %s was deleted before it was taken", errdefs.ErrNotFound, snap.ID, sb.ID)
		}
		if err != nil {
			return snap, err
		}
		switch cur.State {
		case store.SnapshotReady:
			return cur, nil
		case store.SnapshotFailed:
			return cur, fmt.Errorf("%w: snapshot %s failed: %s", errdefs.ErrFailedPrecondition, cur.ID, cur.Reason)
		}
		select {
		case <-wait.C:
		case <-ctx.Done():
			return cur, ErrStillWorking
		}
	}
}

// snapshotOf returns snapshot id of sb, ready for use. Another sandbox's
// snapshot is NotFound, like a missing one.
func (s *Sandboxes) snapshotOf(ctx context.Context, sb *sandbox.Sandbox, id string) (store.Snapshot, error) {
	notFound := fmt.Errorf("%w: snapshot %q of sandbox %s", errdefs.ErrNotFound, Clip(id), sb.ID)
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

// DeleteSnapshot deletes snapshot snapID of sandbox id: its copy on the
// node, its objects and its record, waiting until they are gone
// (ErrStillWorking when that takes too long). The snapshot the sandbox's
// current execution started from, or will start from (a stopped or
// hibernated sandbox's disk), and one still being taken, are Conflict.
func (s *Sandboxes) DeleteSnapshot(ctx context.Context, c Caller, id, snapID string) error {
	sb, err := s.Get(ctx, c, id)
	if err != nil {
		return err
	}
	notFound := fmt.Errorf("%w: snapshot %q of sandbox %s", errdefs.ErrNotFound, Clip(snapID), sb.ID)
	if !sandbox.ValidSnapshotID(snapID) {
		return notFound
	}
	snap, err := s.store.GetSnapshot(ctx, sb.Tenant, snapID)
	if errors.Is(err, errdefs.ErrNotFound) || err == nil && snap.SandboxID != sb.ID {
		return notFound
	}
	if err != nil {
		return err
	}
	switch {
	case snap.ID == sb.StartFrom:
		return fmt.Errorf("%w: snapshot %s is what the sandbox (%s) runs or starts from; it goes with the sandbox", errdefs.ErrConflict, snapID, sb.State)
	case snap.State == store.SnapshotCreating:
		return fmt.Errorf("%w: snapshot %s is still being taken", errdefs.ErrConflict, snapID)
	}
	wait := s.rec.Watch(sb.ID)
	defer wait.Stop()
	if snap.State != store.SnapshotDeleting {
		snap.State = store.SnapshotDeleting
		if err := s.store.UpdateSnapshot(ctx, snap); err != nil {
			return err
		}
	}
	s.rec.Enqueue(sb.ID)
	ctx, cancel := context.WithTimeout(ctx, lifecycleWait)
	defer cancel()
	for {
		if _, err := s.store.GetSnapshot(ctx, sb.Tenant, snapID); errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		select {
		case <-wait.C:
		case <-ctx.Done():
			return ErrStillWorking
		}
	}
}

// Events returns sandbox id's events, oldest first.
func (s *Sandboxes) Events(ctx context.Context, c Caller, id string) ([]store.Event, error) {
	sb, err := s.Get(ctx, c, id)
	if err != nil {
		return nil, err
	}
	return s.store.ListEvents(ctx, sb.ID)
}
