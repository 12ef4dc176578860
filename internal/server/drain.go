package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// Draining a node (admin): POST /v1/nodes/{id}/drain moves the node to
// store.NodeDraining; the scheduler places nothing more there, and the
// reconciler moves its running and paused sandboxes to other nodes by
// hibernate and restore (internal/reconcile/drain.go). Heartbeats keep a
// draining node draining (heartbeatState); POST /v1/nodes/{id}/undrain puts
// it back to ready. Both answer with the node as GET /v1/nodes shows it,
// which counts the sandboxes still on it and names the stopped ones whose
// kept disk lives only there (they are not moved).

// recordHeartbeat records node id's heartbeat. A known node whose record
// is unchanged gets only its heartbeat time written, which leaves its state
// alone. A new node, one whose address, runtimes or capacity changed, and
// one declared down (it came back) get their record written by
// RecordHeartbeat, which keeps a draining node draining in the same atomic
// step: a drain that lands while a heartbeat re-registers the node is
// never lost.
func (s *Server) recordHeartbeat(ctx context.Context, id string, hb *nodeapiv1.Heartbeat, now time.Time) error {
	n, err := s.store.GetNode(ctx, id)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("node %s: heartbeat: %w", id, err)
	}
	capacity := store.Resources{CPUs: int(hb.GetCpus()), MemoryMiB: int(hb.GetMemoryMib()), DiskMiB: int(hb.GetDiskMib())}
	if err == nil && n.State != store.NodeDown && n.Address == hb.GetAddress() && n.Capacity == capacity && slices.Equal(n.Runtimes, hb.GetRuntimes()) {
		err := s.store.Heartbeat(ctx, id, now)
		if !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		// Deleted meanwhile: register it again.
	}
	prev, err := s.store.RecordHeartbeat(ctx, store.Node{ID: id, Address: hb.GetAddress(), Runtimes: hb.GetRuntimes(), Capacity: capacity, LastHeartbeat: now})
	if err != nil {
		return fmt.Errorf("node %s: heartbeat: %w", id, err)
	}
	switch prev {
	case "":
		s.log.Info("node registered", "node", id, "address", hb.GetAddress(), "runtimes", hb.GetRuntimes())
	case store.NodeDown:
		s.log.Info("node back after it was declared lost", "node", id, "address", hb.GetAddress())
	}
	return nil
}

// setNodeState moves registered node id to state (draining or ready) and
// returns it as GET /v1/nodes shows it (restapi.Host.SetNodeState).
// Undraining a node that is down leaves it down: its next heartbeat makes
// it ready.
func (s *Server) setNodeState(ctx context.Context, id string, state store.NodeState) (sandboxv1.Node, error) {
	if !service.ValidNodeID(id) {
		return sandboxv1.Node{}, fmt.Errorf("%w: node %q", errdefs.ErrNotFound, clip(id))
	}
	n, err := s.store.GetNode(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return sandboxv1.Node{}, fmt.Errorf("%w: node %q is not registered (`space nodes list` shows the nodes)", errdefs.ErrNotFound, id)
	}
	if err != nil {
		return sandboxv1.Node{}, err
	}
	if n.State != state && !(state == store.NodeReady && n.State == store.NodeDown) {
		from := n.State
		n.State = state
		if err := s.store.PutNode(ctx, n); err != nil {
			return sandboxv1.Node{}, err
		}
		s.log.Info("node state set by an admin", "node", id, "from", from, "to", state)
	}
	occ, err := s.occupancy(ctx)
	if err != nil {
		return sandboxv1.Node{}, err
	}
	if state == store.NodeDraining {
		s.enqueueOn(ctx, id)
	}
	usage, err := s.store.NodeUsage(ctx)
	if err != nil {
		return sandboxv1.Node{}, err
	}
	api := apiNode(n, s.nodes.Pools()[id], time.Now(), occ[id])
	s.setNodeMemory(&api, usage[id], s.nodes.NodeMemory()[id])
	return api, nil
}

// occupancy is what a node still holds: how many sandboxes have their
// execution there (running, paused or on the way), and the stopped ones
// whose kept disk lives only there.
type occupancy struct {
	sandboxes int
	stopped   []string
}

// occupancy counts, per node, the sandboxes on it.
func (s *Server) occupancy(ctx context.Context) (map[string]occupancy, error) {
	sbs, err := s.store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return nil, fmt.Errorf("count the sandboxes of each node: %w", err)
	}
	out := map[string]occupancy{}
	for _, sb := range sbs {
		if sb.Node == "" {
			continue
		}
		o := out[sb.Node]
		switch sb.State {
		case sandbox.StateHibernated, sandbox.StateDeleted, sandbox.StateFailed:
			continue
		case sandbox.StateStopped:
			if sb.StartFrom == "" {
				continue
			}
			snap, err := s.store.GetSnapshot(ctx, sb.Tenant, sb.StartFrom)
			if err != nil || snap.Node != sb.Node || snap.Artifacts != "" {
				continue
			}
			o.stopped = append(o.stopped, sb.ID)
		default:
			o.sandboxes++
		}
		out[sb.Node] = o
	}
	return out, nil
}

// enqueueOn queues a pass over each sandbox on node id, so a drain starts
// at once rather than at the next resync.
func (s *Server) enqueueOn(ctx context.Context, id string) {
	sbs, err := s.store.ListSandboxes(ctx, store.SandboxFilter{Node: id})
	if err != nil {
		return // the next resync queues them
	}
	for _, sb := range sbs {
		s.rec.Enqueue(sb.ID)
	}
}
