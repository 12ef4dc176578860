// Package scheduler places a new sandbox execution on a node. It is pure: it
// reads a snapshot of the cluster and returns a plan with its reason, so it can
// be tested exhaustively and explained in the sandbox's events.
package scheduler

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// HeartbeatTimeout is how long a node may be silent and still take work.
const HeartbeatTimeout = 15 * time.Second

// Request is what a new execution needs.
type Request struct {
	Runtime   string
	CPUs      int
	MemoryMiB int
	// Tenant is the placing tenant's quota and usage when it has a quota
	// (nil otherwise). The store admits the execution under the quota;
	// the plan's reason reports where the tenant stands.
	Tenant *TenantQuota
	// Only, when not empty, is the nodes that may take the execution: those
	// that hold its template when the template exists on them alone (built
	// from a node-local snapshot). OnlyWhy says what they have, after "only
	// [node…]", for the reason and the refusal.
	Only    []string
	OnlyWhy string
}

// TenantQuota is a tenant's quota and what its sandboxes that hold
// resources use, before the execution being placed.
type TenantQuota struct {
	ID    string
	Quota store.Quota
	Usage store.Usage
}

// explain describes q for the plan's reason.
func (q *TenantQuota) explain() string {
	if q == nil || q.Quota.Unlimited() {
		return ""
	}
	return fmt.Sprintf("; tenant %s holds %s before this one, quota %s", q.ID, q.Usage, q.Quota)
}

// NodeState is one node as the scheduler sees it.
type NodeState struct {
	ID       string
	Runtimes []string
	// Live is false when the node missed its heartbeats or is draining.
	Live bool
	// Capacity and Used are in the units of Request.
	CapacityCPUs, CapacityMiB int
	UsedCPUs, UsedMiB         int
	Sandboxes                 int
	// AvailableMiB is the node's measured free memory (MemAvailable) as
	// last reported; negative when the node has not reported it, and then
	// only the committed sum admits.
	AvailableMiB int
	// Pressure is non-empty while the node reports memory pressure (PSI or
	// low MemAvailable) and says why; such a node takes no new sandbox.
	Pressure string
}

// explainOnly says, for the plan's reason, why only some nodes were
// candidates.
func (r Request) explainOnly() string {
	if len(r.Only) == 0 {
		return ""
	}
	return fmt.Sprintf("; only %v %s", r.Only, r.OnlyWhy)
}

// Overcommit is how far a placement may commit memory beyond what nodes have.
type Overcommit struct {
	// Ratio bounds the sum of the sandboxes' memory limits on a node to
	// Ratio × its memory. Zero or below 1 means 1: the committed sum alone
	// admits, as before overcommit existed.
	Ratio float64
	// ReserveMiB is what a node's measured free memory must keep after the
	// new sandbox's limit when Ratio > 1, so admission follows real use.
	ReserveMiB int
	// CPURatio bounds the sum of the sandboxes' CPUs on a node to CPURatio
	// × its CPUs; zero or below means DefaultCPUOvercommit.
	CPURatio int
}

// cpuLimit is what CPURatio lets a node of capCPUs commit.
func (o Overcommit) cpuLimit(capCPUs int) int {
	if o.CPURatio <= 0 {
		return capCPUs * DefaultCPUOvercommit
	}
	return capCPUs * o.CPURatio
}

// LimitMiB is what Ratio lets a node of capMiB commit.
func (o Overcommit) LimitMiB(capMiB int) int { return o.limitMiB(capMiB) }

func (o Overcommit) limitMiB(capMiB int) int {
	if o.Ratio <= 1 {
		return capMiB
	}
	return int(float64(capMiB) * o.Ratio)
}

// State is the cluster snapshot a placement reads.
type State struct {
	Nodes []NodeState
	// Warm counts, per node id, the prepared executions that match the
	// request (its warm pool, as last reported): a node with one is
	// preferred, since a create there claims it instead of starting one.
	Warm map[string]int
	// Overcommit is the memory overcommit policy (zero: none).
	Overcommit Overcommit
}

// StateFrom builds a State from the store's nodes and sandboxes at now.
func StateFrom(nodes []store.Node, sandboxes []*sandbox.Sandbox, now time.Time) State {
	idx := map[string]*NodeState{}
	var st State
	for _, n := range nodes {
		st.Nodes = append(st.Nodes, NodeState{
			ID: n.ID, Runtimes: n.Runtimes, AvailableMiB: -1,
			Live:         n.State == store.NodeReady && now.Sub(n.LastHeartbeat) < HeartbeatTimeout,
			CapacityCPUs: n.Capacity.CPUs, CapacityMiB: n.Capacity.MemoryMiB,
		})
	}
	for i := range st.Nodes {
		idx[st.Nodes[i].ID] = &st.Nodes[i]
	}
	for _, sb := range sandboxes {
		if n := idx[sb.Node]; n != nil && holdsResources(sb.State) {
			n.UsedCPUs += sb.CPUs
			n.UsedMiB += sb.MemoryMiB
			n.Sandboxes++
		}
	}
	return st
}

// StateFromUsage builds a State from the store's nodes and what their
// sandboxes use (store.Nodes.NodeUsage) at now: StateFrom without reading
// every sandbox.
func StateFromUsage(nodes []store.Node, usage map[string]store.Usage, now time.Time) State {
	st := StateFrom(nodes, nil, now)
	for i := range st.Nodes {
		u := usage[st.Nodes[i].ID]
		st.Nodes[i].UsedCPUs, st.Nodes[i].UsedMiB, st.Nodes[i].Sandboxes = u.CPUs, u.MemoryMiB, u.Sandboxes
	}
	return st
}

// Memory is a node's memory as its last heartbeat measured it.
type Memory struct {
	// Measured is false when the node reported no figures (it could not
	// read them, or sent inconsistent ones): TotalMiB and AvailableMiB
	// are then meaningless.
	Measured               bool
	TotalMiB, AvailableMiB int
	// Pressure is the node's memory pressure reason ("": none).
	Pressure string
}

// WithMemory sets each node's AvailableMiB and Pressure from what its
// heartbeats report (mem, by node id); a node absent from mem, or that
// measured nothing, stays unreported (AvailableMiB -1).
func (st *State) WithMemory(mem map[string]Memory) {
	for i := range st.Nodes {
		m, ok := mem[st.Nodes[i].ID]
		if !ok {
			continue
		}
		if m.Measured {
			st.Nodes[i].AvailableMiB = m.AvailableMiB
		}
		st.Nodes[i].Pressure = m.Pressure
	}
}

// holdsResources reports whether a sandbox in state s occupies its node.
func holdsResources(s sandbox.State) bool {
	switch s {
	case sandbox.StateDeleted, sandbox.StateHibernated, sandbox.StateStopped, sandbox.StateFailed:
		return false
	}
	return true
}

// Plan is a placement decision.
type Plan struct {
	Node   string
	Reason string
}

// DefaultCPUOvercommit lets sandboxes share CPUs. A sandbox's CPUs are a cap
// (CFS quota), not a reservation, and agent sandboxes idle most of their
// lives, so memory is what really bounds a node; this only stops absurd
// stacking. Overcommit.CPURatio replaces it (space server --cpu-overcommit).
const DefaultCPUOvercommit = 64

// Place picks, among the live nodes offering the runtime with room for the
// request, one with a matching prepared execution if any, then the one with
// the most free memory (spreading load); or explains why none fits.
func Place(req Request, st State) (Plan, error) {
	var fits []NodeState
	var why []string
	for _, n := range st.Nodes {
		switch {
		case !n.Live:
			why = append(why, n.ID+": not live")
		case len(req.Only) > 0 && !slices.Contains(req.Only, n.ID):
			why = append(why, fmt.Sprintf("%s: only %v %s", n.ID, req.Only, req.OnlyWhy))
		case !slices.Contains(n.Runtimes, req.Runtime):
			why = append(why, fmt.Sprintf("%s: no %s runtime", n.ID, req.Runtime))
		case n.Pressure != "":
			why = append(why, fmt.Sprintf("%s: memory pressure (%s)", n.ID, n.Pressure))
		case st.Overcommit.limitMiB(n.CapacityMiB)-n.UsedMiB < req.MemoryMiB:
			why = append(why, fmt.Sprintf("%s: %d MiB committed of %d allowed, %d needed", n.ID, n.UsedMiB, st.Overcommit.limitMiB(n.CapacityMiB), req.MemoryMiB))
		case st.Overcommit.Ratio > 1 && n.AvailableMiB >= 0 && n.AvailableMiB-req.MemoryMiB < st.Overcommit.ReserveMiB:
			why = append(why, fmt.Sprintf("%s: %d MiB really free, %d needed plus a %d MiB reserve", n.ID, n.AvailableMiB, req.MemoryMiB, st.Overcommit.ReserveMiB))
		case st.Overcommit.cpuLimit(n.CapacityCPUs)-n.UsedCPUs < req.CPUs:
			why = append(why, fmt.Sprintf("%s: %d CPUs committed of %d allowed (%d CPUs × %d, --cpu-overcommit), %d needed", n.ID, n.UsedCPUs, st.Overcommit.cpuLimit(n.CapacityCPUs), n.CapacityCPUs, st.Overcommit.cpuLimit(1), req.CPUs))
		default:
			fits = append(fits, n)
		}
	}
	if len(fits) == 0 {
		if len(st.Nodes) == 0 {
			return Plan{}, fmt.Errorf("%w: no node has registered", errdefs.ErrNoCapacity)
		}
		return Plan{}, fmt.Errorf("%w: no node can take a %s sandbox with %d MiB (%v)", errdefs.ErrNoCapacity, req.Runtime, req.MemoryMiB, why)
	}
	sort.SliceStable(fits, func(i, j int) bool {
		if wi, wj := st.Warm[fits[i].ID] > 0, st.Warm[fits[j].ID] > 0; wi != wj {
			return wi
		}
		fi, fj := fits[i].CapacityMiB-fits[i].UsedMiB, fits[j].CapacityMiB-fits[j].UsedMiB
		if fi != fj {
			return fi > fj
		}
		return fits[i].ID < fits[j].ID
	})
	best := fits[0]
	warm := ""
	if n := st.Warm[best.ID]; n > 0 {
		warm = fmt.Sprintf(", %d prepared execution(s) of this shape in its warm pool", n)
	}
	return Plan{
		Node:   best.ID,
		Reason: fmt.Sprintf("placed on %s: %d MiB committed of %d allowed (%d MiB of memory), %d sandboxes%s, %d candidate node(s)%s%s", best.ID, best.UsedMiB, st.Overcommit.limitMiB(best.CapacityMiB), best.CapacityMiB, best.Sandboxes, warm, len(fits), req.explainOnly(), req.Tenant.explain()),
	}, nil
}
