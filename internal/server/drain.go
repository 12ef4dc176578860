package server

import (
	"context"
	"errors"
	"fmt"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"net/http"
	"slices"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
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

func (s *Server) handleDrainNode(w http.ResponseWriter, r *http.Request) {
	s.setNodeState(w, r, store.NodeDraining)
}

func (s *Server) handleUndrainNode(w http.ResponseWriter, r *http.Request) {
	s.setNodeState(w, r, store.NodeReady)
}

// setNodeState moves a registered node to state (draining or ready) and
// answers with the node. Undraining a node that is down leaves it down: its
// next heartbeat makes it ready.
func (s *Server) setNodeState(w http.ResponseWriter, r *http.Request, state store.NodeState) {
	id := r.PathValue("id")
	if !validNodeID(id) {
		s.writeError(w, r, fmt.Errorf("%w: node %q", errdefs.ErrNotFound, clip(id)))
		return
	}
	n, err := s.store.GetNode(r.Context(), id)
	if errors.Is(err, errdefs.ErrNotFound) {
		s.writeError(w, r, fmt.Errorf("%w: node %q is not registered (`space nodes list` shows the nodes)", errdefs.ErrNotFound, id))
		return
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if n.State != state && !(state == store.NodeReady && n.State == store.NodeDown) {
		from := n.State
		n.State = state
		if err := s.store.PutNode(r.Context(), n); err != nil {
			s.writeError(w, r, err)
			return
		}
		s.log.Info("node state set by an admin", "node", id, "from", from, "to", state)
	}
	occ, err := s.occupancy(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if state == store.NodeDraining {
		s.enqueueOn(r.Context(), id)
	}
	writeJSON(w, http.StatusOK, apiNode(n, s.nodes.Pools()[id], time.Now(), occ[id]))
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
