package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/scheduler"
	"github.com/spacesandbox/space/internal/store"
)

// A node that stops heartbeating for Config.NodeLostAfter is declared lost:
// its record goes to store.NodeDown, by a conditional update that exactly one
// replica wins (the winner logs it). Declaring is all the winner does: what
// follows is level-based, so a replica that dies after declaring loses
// nothing. Each pass over a running or paused sandbox whose node is down
// recovers it on another node from its latest snapshot in object storage
// (full, else disk), as a new execution (generation+1), or fails it saying
// that no such snapshot exists. Snapshots that lived only on the lost node
// are out of reach. When the node comes back (its heartbeat puts it back to
// ready), the executions it still reports are retired by generation in the
// heartbeat's answer, and a failed sandbox's is stopped (releaseFailed).

// DefaultNodeLostAfter is how long a node may be silent before it is lost.
const DefaultNodeLostAfter = 30 * time.Second

// declareLostNodes marks down the nodes silent for longer than
// NodeLostAfter and queues their sandboxes. A replica that has not yet
// listened for NodeLostAfter declares nothing: the heartbeats of a control
// plane that was down itself have not come in yet. Nor does one whose store
// failed less than NodeLostAfter ago: while the database was unreachable no
// heartbeat could be recorded, and a node silent only in the store is not
// lost.
func (r *Reconciler) declareLostNodes(ctx context.Context, sbs []*sandbox.Sandbox) {
	after := r.cfg.NodeLostAfter
	if after < 0 || time.Since(r.started) < after {
		return
	}
	if failed := r.storeFailed.Load(); failed != 0 && time.Since(time.Unix(0, failed)) < after {
		return
	}
	nodes, err := r.store.ListNodes(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("list nodes", "err", err)
		}
		return
	}
	now := time.Now()
	for _, n := range nodes {
		if n.State == store.NodeDown || now.Sub(n.LastHeartbeat) <= after {
			continue
		}
		marked, err := r.store.MarkNodeDown(ctx, n.ID, now.Add(-after))
		if err != nil {
			r.log.Warn("declare node lost", "node", n.ID, "err", err)
			continue
		}
		if !marked {
			continue // another replica did, or it just came back
		}
		r.log.Warn("node lost: no heartbeat", "node", n.ID, "last_heartbeat", n.LastHeartbeat, "after", after)
		for _, sb := range sbs {
			if sb.Node == n.ID {
				r.Enqueue(sb.ID)
			}
		}
	}
}

// lostNode returns the record of node id when it has been declared lost.
func (r *Reconciler) lostNode(ctx context.Context, id string) (store.Node, bool) {
	if id == "" {
		return store.Node{}, false
	}
	n, err := r.store.GetNode(ctx, id)
	if err != nil || n.State != store.NodeDown {
		return store.Node{}, false
	}
	return n, true
}

// lostNodeAtStart is lostNode for the start of a pass over a running or
// paused sandbox: a node the pass's resync listed neither down nor draining
// is not read again (unsettled.go).
func (r *Reconciler) lostNodeAtStart(ctx context.Context, id string) (store.Node, bool) {
	if n, ok := viewedNode(ctx, id); ok && n.State != store.NodeDown {
		return store.Node{}, false
	}
	return r.lostNode(ctx, id)
}

// recoverElsewhere moves sb, which ran (or was paused) on the lost node n,
// to another node from its latest snapshot in object storage, or fails it.
func (r *Reconciler) recoverElsewhere(ctx context.Context, sb *sandbox.Sandbox, n store.Node) (time.Duration, error) {
	lost := fmt.Sprintf("node %s lost (no heartbeat since %s)", n.ID, n.LastHeartbeat.Format(time.RFC3339))
	if r.cfg.NoRecovery {
		return r.failSandbox(ctx, sb, lost+"; crash recovery is off")
	}
	snap, found, err := r.durableSnapshot(ctx, sb)
	if err != nil {
		return time.Second, err
	}
	if !found {
		return r.failSandbox(ctx, sb, fmt.Sprintf("node %s lost; no snapshot in object storage", n.ID))
	}
	target, why, err := r.placeRecovery(ctx, sb)
	if err != nil {
		if time.Since(n.LastHeartbeat) > r.cfg.NodeLostAfter+r.cfg.StartTimeout {
			return r.failSandbox(ctx, sb, fmt.Sprintf("%s; no node could take the sandbox: %v", lost, err))
		}
		return 5 * time.Second, fmt.Errorf("sandbox %s: %s: no node to recover on yet: %w", sb.ID, lost, err)
	}
	died := sb.ExecID
	if err := sb.Apply(sandbox.OpRecover); err != nil {
		return r.failSandbox(ctx, sb, lost+": "+err.Error())
	}
	sb.StartFrom, sb.Node = snap.ID, target
	r.event(ctx, sb.ID, "recovering", fmt.Sprintf("%s: execution %s recovered on %s (%s) from %s snapshot %s in object storage, taken %s; generation %d",
		lost, died, target, why, snap.Kind, snap.ID, snap.CreatedAt.Format(time.RFC3339), sb.Generation))
	after, err := r.update(ctx, sb)
	if err == nil && after == 0 {
		after = time.Millisecond
	}
	return after, err
}

// durableSnapshot returns the snapshot a sandbox of a lost node comes back
// from: the newest ready full snapshot in object storage, else the newest
// disk one.
func (r *Reconciler) durableSnapshot(ctx context.Context, sb *sandbox.Sandbox) (store.Snapshot, bool, error) {
	return r.newestSnapshot(ctx, sb, func(s store.Snapshot) bool { return s.Artifacts != "" })
}

// placeRecovery picks a live node for sb's new execution.
func (r *Reconciler) placeRecovery(ctx context.Context, sb *sandbox.Sandbox) (node, why string, err error) {
	nodes, err := r.store.ListNodes(ctx)
	if err != nil {
		return "", "", err
	}
	usage, err := r.store.NodeUsage(ctx)
	if err != nil {
		return "", "", err
	}
	st := scheduler.StateFromUsage(nodes, usage, time.Now())
	st.Overcommit = r.cfg.Overcommit
	if r.cfg.NodeMemory != nil {
		st.WithMemory(r.cfg.NodeMemory())
	}
	plan, err := scheduler.Place(scheduler.Request{Runtime: sb.Runtime, CPUs: sb.CPUs, MemoryMiB: sb.MemoryMiB}, st)
	if err != nil {
		return "", "", err
	}
	return plan.Node, plan.Reason, nil
}
