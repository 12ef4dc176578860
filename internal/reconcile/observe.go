package reconcile

import (
	"context"
	"encoding/json"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
)

// What a node runs is known from its heartbeats. With one replica they all
// arrive here (Observe). Behind a load balancer each replica receives only
// some, so the replica that receives one also writes it to the store
// (store.NodeReports, written by the server) and the reconciler judges a
// node by the fresher of what it heard itself and what the store holds.
// The store's reports are read at most once per sharedObservationTTL.

// sharedObservationTTL is how long the store's node reports are reused
// before they are read again.
const sharedObservationTTL = time.Second

// goneTTL is how long an execution this replica stopped is kept out of
// store reports received before the stop.
const goneTTL = time.Minute

// ExecutionsJSON is how a node's execution list is stored in a
// store.NodeReport: a JSON array of nodev1.Execution.
func ExecutionsJSON(execs []nodev1.Execution) (string, error) {
	if execs == nil {
		execs = []nodev1.Execution{}
	}
	b, err := json.Marshal(execs)
	return string(b), err
}

// sharedObservations returns the node reports of the store, read again
// when the last read is older than sharedObservationTTL. A store error
// leaves the previous read in place.
func (r *Reconciler) sharedObservations(ctx context.Context) map[string]observation {
	r.sharedMu.Lock()
	defer r.sharedMu.Unlock()
	if r.shared != nil && time.Since(r.sharedAt) < sharedObservationTTL {
		return r.shared
	}
	reports, err := r.store.ListNodeReports(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("read node reports", "err", err)
		}
		return r.shared
	}
	m := make(map[string]observation, len(reports))
	for _, rep := range reports {
		var execs []nodev1.Execution
		if err := json.Unmarshal([]byte(rep.Executions), &execs); err != nil {
			r.log.Warn("node report: executions", "node", rep.Node, "err", err)
			continue
		}
		obs := observation{at: rep.ReportedAt, executions: make(map[string]nodev1.Execution, len(execs))}
		for _, ex := range execs {
			obs.executions[ex.ExecID] = ex
		}
		m[rep.Node] = obs
	}
	r.shared, r.sharedAt = m, time.Now()
	return m
}

// observation returns the freshest report of node: what this replica
// heard, or the store's report when it is newer. seen is false when
// neither exists.
func (r *Reconciler) observation(ctx context.Context, node string) (observation, bool) {
	shared, inStore := r.sharedObservations(ctx)[node]
	r.mu.Lock()
	defer r.mu.Unlock()
	local, heard := r.observed[node]
	switch {
	case inStore && (!heard || shared.at.After(local.at)):
		return r.withoutGone(shared), true
	case heard:
		return cloneObservation(local), true
	}
	return observation{}, false
}

// observationOf is observation(ctx, node) cut to execution exec: its
// executions hold exec alone, if the freshest report has it. It copies
// nothing else of the node's report, so a sandbox's pass costs the same
// however many executions its node runs (observation copies them all:
// BenchmarkObservationOf, TestObservationOfAgreesWithObservation).
func (r *Reconciler) observationOf(ctx context.Context, node, exec string) (observation, bool) {
	shared, inStore := r.sharedObservations(ctx)[node]
	r.mu.Lock()
	defer r.mu.Unlock()
	local, heard := r.observed[node]
	var from observation
	switch {
	case inStore && (!heard || shared.at.After(local.at)):
		from = shared
		if at, ok := r.gone[exec]; ok && at.After(shared.at) {
			return observation{at: shared.at, executions: map[string]nodev1.Execution{}}, true
		}
	case heard:
		from = local
	default:
		return observation{}, false
	}
	out := observation{at: from.at, executions: make(map[string]nodev1.Execution, 1)}
	if ex, ok := from.executions[exec]; ok {
		out.executions[exec] = ex
	}
	return out, true
}

// observations returns the freshest report of every node.
func (r *Reconciler) observations(ctx context.Context) map[string]observation {
	shared := r.sharedObservations(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]observation, len(shared)+len(r.observed))
	for node, obs := range shared {
		out[node] = r.withoutGone(obs)
	}
	for node, obs := range r.observed {
		if cur, ok := out[node]; !ok || !cur.at.After(obs.at) {
			out[node] = cloneObservation(obs)
		}
	}
	return out
}

// observedExecutionsOf reports, per node, the ids of the executions of
// sandbox sandboxID in that node's freshest observation (as observations
// chooses it), without copying every node's observation.
func (r *Reconciler) observedExecutionsOf(ctx context.Context, sandboxID string) map[string][]string {
	shared := r.sharedObservations(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for node, obs := range shared {
		if own, ok := r.observed[node]; ok && !obs.at.After(own.at) {
			continue // this replica's own observation is as fresh
		}
		for id, ex := range obs.executions {
			if at, ok := r.gone[id]; ok && at.After(obs.at) {
				continue
			}
			if ex.SandboxID == sandboxID {
				out[node] = append(out[node], id)
			}
		}
	}
	for node, obs := range r.observed {
		if cur, ok := shared[node]; ok && cur.at.After(obs.at) {
			continue
		}
		for id, ex := range obs.executions {
			if ex.SandboxID == sandboxID {
				out[node] = append(out[node], id)
			}
		}
	}
	return out
}

// withoutGone drops from obs the executions this replica stopped after obs
// was reported. r.mu must be held.
func (r *Reconciler) withoutGone(obs observation) observation {
	out := observation{at: obs.at, executions: make(map[string]nodev1.Execution, len(obs.executions))}
	for id, ex := range obs.executions {
		if at, ok := r.gone[id]; ok && at.After(obs.at) {
			continue
		}
		out.executions[id] = ex
	}
	return out
}

func cloneObservation(obs observation) observation {
	out := observation{at: obs.at, executions: make(map[string]nodev1.Execution, len(obs.executions))}
	for id, ex := range obs.executions {
		out.executions[id] = ex
	}
	return out
}

// forget records that exec no longer runs on node: this replica stopped it.
func (r *Reconciler) forget(node, exec string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.observed[node].executions, exec)
	now := time.Now()
	r.gone[exec] = now
	for id, at := range r.gone {
		if now.Sub(at) > goneTTL {
			delete(r.gone, id)
		}
	}
}
