package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
)

// A node that gets no heartbeat answer for FenceAfter freezes its running
// executions and reports them fenced (internal/node/fence.go), so that the
// copy a replica brings back elsewhere once the node is declared lost never
// runs beside the old one. Only the control plane thaws a fenced
// execution: when the node is heard again and the sandbox still runs there
// (it was not recovered elsewhere meanwhile — then the heartbeat answer
// retires the execution instead), the pass over the sandbox resumes it.
// With several replicas that pass holds the sandbox's lease, as a recovery
// does, so a thaw and a recovery of one sandbox never overlap.

// FenceAfter is the heartbeat lease nodes get with every answer. A third of
// NodeLostAfter leaves the other two thirds for the clocks of the replicas
// to disagree (each compares heartbeat times that others recorded) and for
// the freeze itself: 10 s of 30 s by default. 0 when node loss is off:
// nothing is recovered elsewhere, so nothing needs fencing.
func (r *Reconciler) FenceAfter() time.Duration {
	if r.cfg.NodeLostAfter < 0 {
		return 0
	}
	return r.cfg.NodeLostAfter / 3
}

// thaw resumes sb's execution, which its node froze while it was cut off
// from the control plane.
func (r *Reconciler) thaw(ctx context.Context, sb *sandbox.Sandbox) (time.Duration, error) {
	obs, _ := r.observationOf(ctx, sb.Node, sb.ExecID)
	r.mu.Lock()
	thawedAt, thawed := r.thawed[sb.ExecID]
	r.mu.Unlock()
	if thawed && !obs.at.After(thawedAt) {
		return 0, nil // a report from before this replica thawed it
	}
	api, err := r.node(sb.Node)
	if err != nil {
		return time.Second, err
	}
	if err := api.Resume(ctx, sb.ExecID); err != nil {
		return time.Second, fmt.Errorf("sandbox %s: resume fenced execution %s on %s: %w", sb.ID, sb.ExecID, sb.Node, err)
	}
	now := time.Now()
	r.mu.Lock()
	r.thawed[sb.ExecID] = now
	for id, at := range r.thawed {
		if now.Sub(at) > goneTTL {
			delete(r.thawed, id)
		}
	}
	r.mu.Unlock()
	r.event(ctx, sb.ID, "resumed", fmt.Sprintf("node %s lost touch with the control plane and froze execution %s (fenced); it is back and the sandbox was not moved: resumed", sb.Node, sb.ExecID))
	return 0, nil
}
