package reconcile

import (
	"context"
	"fmt"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/retention"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// autoTier marks the snapshots the schedule takes; retention prunes only
// these (manual, stop, fork and hibernate snapshots stay until their
// sandbox goes).
const autoTier = "auto"

// scheduleSnapshots asks for the running sandbox's next scheduled snapshot
// when it is due (the pending-snapshot pass takes it), prunes scheduled
// snapshots by the retention policy, and returns when to look again (0:
// no schedule).
func (r *Reconciler) scheduleSnapshots(ctx context.Context, sb *sandbox.Sandbox) (time.Duration, error) {
	sched := r.cfg.Schedule
	if sb.Runtime != "vm" {
		sched.FullEvery = 0 // ns cannot save memory
	}
	if sched.DiskEvery <= 0 && sched.FullEvery <= 0 {
		return 0, nil
	}
	snaps, err := r.store.ListSnapshots(ctx, store.SnapshotFilter{SandboxID: sb.ID})
	if err != nil {
		return time.Second, err
	}
	var lastDisk, lastFull time.Time
	var auto []retention.Snapshot
	for _, s := range snaps {
		if s.Tier != autoTier || s.Generation != sb.Generation && s.State == store.SnapshotCreating {
			continue
		}
		if s.State == store.SnapshotCreating {
			return 0, nil // one is being taken
		}
		if s.Kind == store.SnapshotFull {
			lastFull = later(lastFull, s.CreatedAt)
		} else {
			lastDisk = later(lastDisk, s.CreatedAt)
		}
		if s.State == store.SnapshotReady {
			auto = append(auto, retention.Snapshot{ID: s.ID, Kind: retention.Kind(s.Kind), CreatedAt: s.CreatedAt, Pinned: s.ID == sb.StartFrom})
		}
	}
	// The first scheduled snapshot comes one period after the sandbox was
	// created, not at once.
	lastDisk, lastFull = later(lastDisk, sb.CreatedAt), later(lastFull, sb.CreatedAt)
	now, steady := r.wallNow()
	if !steady {
		return time.Second, nil // the schedule and the retention tiers wait for a steady clock
	}
	if kind, due := sched.Due(now, lastDisk, lastFull); due {
		snap := store.Snapshot{
			ID: sandbox.NewSnapshotID(), SandboxID: sb.ID, Tenant: sb.Tenant, Kind: store.SnapshotKind(kind), Tier: autoTier,
			State: store.SnapshotCreating, Node: sb.Node, Runtime: sb.Runtime, Template: sb.Template,
			CPUs: sb.CPUs, MemoryMiB: sb.MemoryMiB, Generation: sb.Generation, CreatedAt: now.UTC(),
		}
		if err := r.store.CreateSnapshot(ctx, snap); err != nil {
			return time.Second, err
		}
		return time.Millisecond, nil
	}
	_, prune := retention.Keep(now, auto, r.cfg.Retention)
	for _, id := range prune {
		if err := r.pruneSnapshot(ctx, id); err != nil {
			r.log.Warn("prune snapshot", "sandbox", sb.ID, "snapshot", id, "err", err)
		}
	}
	if _, at, ok := sched.Next(now, lastDisk, lastFull); ok {
		return max(time.Until(at), time.Millisecond), nil
	}
	return 0, nil
}

// pruneSnapshot removes a snapshot retention no longer keeps.
func (r *Reconciler) pruneSnapshot(ctx context.Context, id string) error {
	snap, err := r.store.GetSnapshot(ctx, "", id)
	if err != nil {
		return err
	}
	if snap.Node != "" {
		api, err := r.node(snap.Node)
		if err != nil {
			return err
		}
		if err := api.DeleteSnapshot(ctx, snap.ID); err != nil {
			return fmt.Errorf("delete on %s: %w", snap.Node, err)
		}
	}
	if err := r.deleteObjects(ctx, snap); err != nil {
		return err
	}
	if err := r.store.DeleteSnapshot(ctx, id); err != nil {
		return err
	}
	r.event(ctx, snap.SandboxID, "snapshot", fmt.Sprintf("%s snapshot %s of %s pruned by retention", snap.Kind, snap.ID, snap.CreatedAt.Format(time.RFC3339)))
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// idleCheck pauses, hibernates or stops (the sandbox's IdleAction) a running
// sandbox whose guest has served no request for its IdleTimeout. Activity is
// counted from the later of the guest's last request and the sandbox's last
// change (a resume is activity). done reports that it acted (or failed to).
func (r *Reconciler) idleCheck(ctx context.Context, sb *sandbox.Sandbox, ex nodev1.Execution) (time.Duration, bool, error) {
	if sb.IdleTimeout <= 0 || ex.LastActivity.IsZero() {
		return 0, false, nil
	}
	now, steady := r.wallNow()
	if !steady {
		return 0, false, nil
	}
	last := later(ex.LastActivity, sb.UpdatedAt)
	idle := now.Sub(last)
	if idle < sb.IdleTimeout {
		return 0, false, nil
	}
	op := sandbox.IdleOp(sb.IdleAction)
	if err := sb.Apply(op); err != nil {
		return 0, true, err
	}
	r.event(ctx, sb.ID, "idle", fmt.Sprintf("no request for %s (idle timeout %s): %s", idle.Round(time.Second), sb.IdleTimeout, op))
	after, err := r.update(ctx, sb)
	if err == nil && after == 0 {
		after = time.Millisecond
	}
	return after, true, err
}
