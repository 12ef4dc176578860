package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// pendingSnapshots takes the snapshots asked of sb (rows in state
// creating) when it is running or paused, fails them when it is stopped,
// hibernated, failed or going away, and leaves them pending while it moves
// (they are taken once it settles). It never holds the lifecycle up: it
// returns a delay only to retry a node that did not answer.
func (r *Reconciler) pendingSnapshots(ctx context.Context, sb *sandbox.Sandbox) (time.Duration, error) {
	// Snapshots a user deleted go first: their node copy, own objects and row.
	doomed, err := r.store.ListSnapshots(ctx, store.SnapshotFilter{SandboxID: sb.ID, State: store.SnapshotDeleting})
	if err != nil {
		return time.Second, err
	}
	for _, snap := range doomed {
		if err := r.dropSnapshot(ctx, snap); err != nil {
			r.log.Warn("delete snapshot", "sandbox", sb.ID, "snapshot", snap.ID, "err", err)
			return time.Second, nil
		}
		r.event(ctx, sb.ID, "snapshot", fmt.Sprintf("%s snapshot %s deleted", snap.Kind, snap.ID))
	}
	pending, err := r.store.ListSnapshots(ctx, store.SnapshotFilter{SandboxID: sb.ID, State: store.SnapshotCreating})
	if err != nil {
		return time.Second, err
	}
	for _, snap := range pending {
		if snap.Tier == "stop" || snap.Tier == "hibernate" {
			// Taken by the stop or hibernate step itself.
			if sb.State == sandbox.StateStopping || sb.State == sandbox.StateHibernating {
				continue
			}
		}
		switch {
		case sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused:
			if err := r.takeSnapshot(ctx, sb, &snap, false); err != nil && errdefs.IsUnavailable(err) {
				return time.Second, err
			}
			// Any other failure is recorded on the row.
		case sb.State.Transitional() && sb.State != sandbox.StateDeleting:
			// Taken once the sandbox settles.
		default:
			r.failSnapshot(ctx, &snap, fmt.Sprintf("the sandbox is %s: a snapshot needs a running or paused sandbox", sb.State))
		}
	}
	return 0, nil
}

// dropRequestsOfGone removes the snapshots still asked of sandbox id after
// its row is gone. A snapshot request races a delete (or an expiry): the
// API checks the sandbox, the delete removes its snapshots and its row, then
// the request's row is written, and nobody would ever take or fail it — its
// caller would wait for it until its wait ran out. The request's own
// enqueue brings its pass here, after its row was written, so the row goes
// and the caller's wait ends with NotFound, as the sandbox's does.
func (r *Reconciler) dropRequestsOfGone(ctx context.Context, id string) (time.Duration, error) {
	pending, err := r.store.ListSnapshots(ctx, store.SnapshotFilter{SandboxID: id, State: store.SnapshotCreating})
	if err != nil {
		return time.Second, fmt.Errorf("sandbox %s is gone: its pending snapshots: %w", id, err)
	}
	for _, snap := range pending {
		if err := r.dropSnapshot(ctx, snap); err != nil {
			return time.Second, fmt.Errorf("sandbox %s is gone: drop its pending snapshot %s: %w", id, snap.ID, err)
		}
		r.event(ctx, id, "snapshot", fmt.Sprintf("snapshot %s dropped: the sandbox was deleted before it was taken", snap.ID))
	}
	return 0, nil
}

// takeSnapshot has sb's node take snap and records the outcome on its row.
// A failure other than an unreachable node fails the row and is returned.
func (r *Reconciler) takeSnapshot(ctx context.Context, sb *sandbox.Sandbox, snap *store.Snapshot, leavePaused bool) error {
	api, err := r.node(sb.Node)
	if err != nil {
		return fmt.Errorf("%w: node %s: %v", errdefs.ErrUnavailable, sb.Node, err)
	}
	got, err := api.Snapshot(ctx, sb.ExecID, nodev1.TakeSnapshot{SnapshotID: snap.ID, Kind: string(snap.Kind), LeavePaused: leavePaused})
	if err != nil {
		if errdefs.IsUnavailable(err) || ctx.Err() != nil {
			return err
		}
		r.failSnapshot(ctx, snap, err.Error())
		return err
	}
	if snap.Tier != "hibernate" && snap.Tier != "stop" {
		failpoint.SnapshotAfterTake.Hit()
	}
	snap.State, snap.Reason, snap.Node, snap.SizeBytes = store.SnapshotReady, "", sb.Node, got.SizeBytes
	if err := r.store.UpdateSnapshot(ctx, *snap); err != nil {
		return fmt.Errorf("%w: snapshot %s: record: %v", errdefs.ErrUnavailable, snap.ID, err)
	}
	r.event(ctx, sb.ID, "snapshot", fmt.Sprintf("%s snapshot %s taken (%s, %d bytes)", snap.Kind, snap.ID, snap.Tier, got.SizeBytes))
	return nil
}

func (r *Reconciler) failSnapshot(ctx context.Context, snap *store.Snapshot, reason string) {
	snap.State, snap.Reason = store.SnapshotFailed, reason
	if err := r.store.UpdateSnapshot(ctx, *snap); err != nil {
		r.log.Warn("record failed snapshot", "snapshot", snap.ID, "err", err)
	}
	r.event(ctx, snap.SandboxID, "snapshot", fmt.Sprintf("snapshot %s failed: %s", snap.ID, reason))
}

// lifecycleSnapshot returns the row of the snapshot an operation takes of
// sb's current generation, creating it (state creating) on the first pass.
func (r *Reconciler) lifecycleSnapshot(ctx context.Context, sb *sandbox.Sandbox, op string, kind store.SnapshotKind) (store.Snapshot, error) {
	id := sandbox.LifecycleSnapshotID(sb.ID, op, sb.Generation)
	snap, err := r.store.GetSnapshot(ctx, "", id)
	if err == nil || !errors.Is(err, errdefs.ErrNotFound) {
		return snap, err
	}
	snap = store.Snapshot{
		ID: id, SandboxID: sb.ID, Tenant: sb.Tenant, Kind: kind, Tier: op, State: store.SnapshotCreating,
		Node: sb.Node, Runtime: sb.Runtime, Template: sb.Template, CPUs: sb.CPUs, MemoryMiB: sb.MemoryMiB,
		Generation: sb.Generation, CreatedAt: time.Now().UTC(),
	}
	if err := r.store.CreateSnapshot(ctx, snap); err != nil && !errors.Is(err, errdefs.ErrConflict) {
		return snap, err
	}
	return r.store.GetSnapshot(ctx, "", id)
}

// stopSandbox keeps the sandbox's disk as a snapshot on its node, then
// releases the execution: a later start boots a new execution from it.
// Each step is idempotent, so a pass interrupted anywhere is re-driven.
func (r *Reconciler) stopSandbox(ctx context.Context, sb *sandbox.Sandbox) (time.Duration, error) {
	snap, err := r.lifecycleSnapshot(ctx, sb, "stop", store.SnapshotDisk)
	if err != nil {
		return time.Second, err
	}
	if snap.State != store.SnapshotReady {
		if err := r.takeSnapshot(ctx, sb, &snap, false); err != nil {
			if errdefs.IsUnavailable(err) && time.Since(sb.UpdatedAt) < r.cfg.StartTimeout {
				return time.Second, err
			}
			return r.failSandbox(ctx, sb, "stop: keep the disk: "+err.Error())
		}
	}
	failpoint.StopAfterSnapshot.Hit()
	api, err := r.node(sb.Node)
	if err != nil {
		return time.Second, err
	}
	if err := api.Stop(ctx, sb.ExecID); err != nil {
		return time.Second, fmt.Errorf("sandbox %s: stop %s: %w", sb.ID, sb.ExecID, err)
	}
	failpoint.StopAfterRelease.Hit()
	sb.StartFrom = snap.ID
	sb.State = sandbox.Settled(sb.State)
	after, err := r.update(ctx, sb)
	if err == nil && after == 0 {
		r.event(ctx, sb.ID, "state", fmt.Sprintf("stopped; disk kept as %s on %s", snap.ID, sb.Node))
	}
	return after, err
}

// stopPrevious stops every execution of sb other than the current one: the
// one a rollback or a recovery replaces. It asks sb's node what it runs now
// (a heartbeat may not have reported an execution started a moment ago) and
// looks at what every other node last reported (the replaced execution may
// run elsewhere; there the heartbeat retires it and the orphan sweep stops
// it if this misses it).
func (r *Reconciler) stopPrevious(ctx context.Context, sb *sandbox.Sandbox, api NodeAPI) error {
	type target struct{ node, exec string }
	seen := map[target]bool{}
	var old []target
	add := func(node, exec string) {
		t := target{node, exec}
		if exec != sb.ExecID && !seen[t] {
			seen[t] = true
			old = append(old, t)
		}
	}
	if l, ok := api.(interface {
		ListSandbox(context.Context, string) ([]nodev1.Execution, error)
	}); ok {
		if execs, err := l.ListSandbox(ctx, sb.ID); err == nil {
			for _, ex := range execs {
				if ex.SandboxID == sb.ID {
					add(sb.Node, ex.ExecID)
				}
			}
		}
	}
	for node, ids := range r.observedExecutionsOf(ctx, sb.ID) {
		for _, id := range ids {
			add(node, id)
		}
	}
	for _, t := range old {
		napi := api
		if _, lost := r.lostNode(ctx, t.node); lost && t.node != sb.Node {
			continue // retired by generation when the node comes back
		}
		if t.node != sb.Node {
			var err error
			if napi, err = r.node(t.node); err != nil {
				continue // that node's heartbeat retires it; the orphan sweep stops it
			}
		}
		if err := napi.Stop(ctx, t.exec); err != nil {
			if t.node != sb.Node {
				// A node that does not answer (partitioned, its node process
				// down) retires the execution with its next heartbeat
				// answer and the orphan sweep stops it then; the new
				// execution does not wait for it.
				r.log.Warn("stop replaced execution on another node", "sandbox", sb.ID, "exec", t.exec, "node", t.node, "err", err)
				continue
			}
			return fmt.Errorf("sandbox %s: stop replaced execution %s on %s: %w", sb.ID, t.exec, t.node, err)
		}
		r.forget(t.node, t.exec)
		r.event(ctx, sb.ID, "state", "replaced execution "+t.exec+" stopped on "+t.node)
	}
	return nil
}

// failSandbox records that sb failed and why.
func (r *Reconciler) failSandbox(ctx context.Context, sb *sandbox.Sandbox, reason string) (time.Duration, error) {
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

// deleteSnapshots removes every snapshot of sb from its node and the store.
func (r *Reconciler) deleteSnapshots(ctx context.Context, sb *sandbox.Sandbox) error {
	snaps, err := r.store.ListSnapshots(ctx, store.SnapshotFilter{SandboxID: sb.ID})
	if err != nil {
		return err
	}
	for _, snap := range snaps {
		if _, lost := r.lostNode(ctx, snap.Node); !lost && snap.Node != "" {
			api, err := r.node(snap.Node)
			if err != nil {
				return fmt.Errorf("snapshot %s: node %s: %w", snap.ID, snap.Node, err)
			}
			if err := api.DeleteSnapshot(ctx, snap.ID); err != nil {
				return fmt.Errorf("snapshot %s: delete on %s: %w", snap.ID, snap.Node, err)
			}
		}
		if err := r.deleteObjects(ctx, snap); err != nil {
			return err
		}
		if err := r.store.DeleteSnapshot(ctx, snap.ID); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
	}
	if len(snaps) > 0 {
		r.collectTenantObjects(ctx, sb.Tenant)
	}
	return nil
}

// recoveryBackoff is how long an execution started from a snapshot must live
// before its death is recovered from the same snapshot again.
const recoveryBackoff = time.Minute

// recoverSandbox brings back a running sandbox whose execution died: an
// ns execution from its own disk as it died (crashSnapshot), else from its
// latest snapshot on its node: a full snapshot (memory too) when there is
// one, else the newest disk snapshot, booted. ok is false when there is
// nothing to recover from, or recovery was already tried for this
// generation's failure (the caller then fails the sandbox).
func (r *Reconciler) recoverSandbox(ctx context.Context, sb *sandbox.Sandbox, reason string) (after time.Duration, err error, ok bool) {
	if r.cfg.NoRecovery {
		return 0, nil, false
	}
	snap, found, err := r.crashSnapshot(ctx, sb)
	if err != nil {
		return time.Second, err, true
	}
	if !found {
		snap, found, err = r.latestSnapshot(ctx, sb)
	}
	if err != nil {
		return time.Second, err, true
	}
	if !found {
		return 0, nil, false
	}
	if sb.StartFrom == snap.ID && time.Since(sb.UpdatedAt) < recoveryBackoff {
		// The execution started from this very snapshot died at once:
		// starting it again would loop.
		return 0, nil, false
	}
	died := sb.ExecID
	if err := sb.Apply(sandbox.OpRecover); err != nil {
		return 0, nil, false
	}
	sb.StartFrom, sb.Node = snap.ID, snap.Node
	from := fmt.Sprintf("%s snapshot %s taken %s", snap.Kind, snap.ID, snap.CreatedAt.Format(time.RFC3339))
	if snap.Tier == crashTier {
		from = fmt.Sprintf("its disk as it died (snapshot %s)", snap.ID)
	}
	r.event(ctx, sb.ID, "recovering", fmt.Sprintf("execution %s died (%s); recovering from %s", died, reason, from))
	after, err = r.update(ctx, sb)
	if err == nil && after == 0 {
		after = time.Millisecond
	}
	return after, err, true
}

// crashTier is the tier of the disk snapshot a recovery keeps of an ns
// execution that died (crashSnapshot).
const crashTier = "crash"

// crashSnapshot keeps the disk of sb's dead ns execution as a snapshot for
// its recovery to start from. An ns sandbox's disk is a volume on its node
// that outlives its processes: when they die (its guest killed, its init
// gone) the volume holds every write they made, as a disk holds after a
// power cut, and a recovery from it loses none of them — where the newest
// snapshot would lose everything written since. Only an execution its node
// reports failed has its volume still (one gone from the node has none).
// found is false when there is nothing to keep: another runtime, no such
// execution, the snapshot refused (its row says why), or the execution that
// died was itself started from a crash snapshot less than recoveryBackoff
// ago (the caller's loop guard then judges the snapshot it started from).
// An error is a node that did not answer: the pass is retried.
func (r *Reconciler) crashSnapshot(ctx context.Context, sb *sandbox.Sandbox) (store.Snapshot, bool, error) {
	if sb.Runtime != "ns" || sb.Node == "" || sb.ExecID == "" {
		return store.Snapshot{}, false, nil
	}
	if obs, seen := r.observationOf(ctx, sb.Node, sb.ExecID); !seen || obs.executions[sb.ExecID].State != nodev1.ExecFailed {
		return store.Snapshot{}, false, nil
	}
	if sb.StartFrom != "" && time.Since(sb.UpdatedAt) < recoveryBackoff {
		if from, err := r.store.GetSnapshot(ctx, "", sb.StartFrom); err == nil && from.Tier == crashTier {
			return store.Snapshot{}, false, nil
		}
	}
	snap, err := r.lifecycleSnapshot(ctx, sb, crashTier, store.SnapshotDisk)
	if err != nil {
		return snap, false, err
	}
	if snap.State == store.SnapshotCreating {
		if err := r.takeSnapshot(ctx, sb, &snap, false); err != nil {
			if errdefs.IsUnavailable(err) || ctx.Err() != nil {
				return snap, false, err
			}
			return snap, false, nil // the row records why
		}
	}
	if snap.State != store.SnapshotReady {
		return snap, false, nil
	}
	// The disks of earlier deaths are superseded by this one.
	older, err := r.store.ListSnapshots(ctx, store.SnapshotFilter{SandboxID: sb.ID, State: store.SnapshotReady})
	if err != nil {
		return snap, true, nil // kept; the next death looks again
	}
	for _, o := range older {
		if o.Tier == crashTier && o.ID != snap.ID {
			o.State = store.SnapshotDeleting
			if err := r.store.UpdateSnapshot(ctx, o); err != nil {
				r.log.Warn("drop a superseded crash snapshot", "sandbox", sb.ID, "snapshot", o.ID, "err", err)
			}
		}
	}
	return snap, true, nil
}

// latestSnapshot returns the snapshot a recovery of sb starts from: the
// newest ready full snapshot on its node, else the newest ready disk one.
func (r *Reconciler) latestSnapshot(ctx context.Context, sb *sandbox.Sandbox) (store.Snapshot, bool, error) {
	return r.newestSnapshot(ctx, sb, func(s store.Snapshot) bool { return s.Node != "" })
}

// newestSnapshot returns sb's newest ready snapshot of its runtime that
// usable accepts, a full one before any disk one.
func (r *Reconciler) newestSnapshot(ctx context.Context, sb *sandbox.Sandbox, usable func(store.Snapshot) bool) (store.Snapshot, bool, error) {
	snaps, err := r.store.ListSnapshots(ctx, store.SnapshotFilter{SandboxID: sb.ID, State: store.SnapshotReady})
	if err != nil {
		return store.Snapshot{}, false, err
	}
	var best store.Snapshot
	found := false
	for _, s := range snaps { // oldest first: later ones win ties
		if s.Runtime != sb.Runtime || !usable(s) {
			continue
		}
		if !found || s.Kind == store.SnapshotFull && best.Kind != store.SnapshotFull ||
			s.Kind == best.Kind && !s.CreatedAt.Before(best.CreatedAt) {
			best, found = s, true
		}
	}
	return best, found, nil
}
