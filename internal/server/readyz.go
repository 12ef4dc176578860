package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/scheduler"
	"github.com/spacesandbox/space/internal/service"
)

// DefaultWarmupWait is how long a create waits by default for its template
// and runtime to become ready (service.DefaultWarmupWait).
const DefaultWarmupWait = service.DefaultWarmupWait

// pendingRuntimes are the runtimes node id said in its last heartbeat it is
// bringing up or offers (NodeHeartbeat: the store may not have its offer
// yet; service.stateOf reads the store's first); nothing when that
// heartbeat is not recent. A replica knows what the heartbeats it received
// said: on another one a create for such a runtime is refused or waits for
// the node's next heartbeat there.
func (n *Nodes) pendingRuntimes(id string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	o, ok := n.observed[id]
	if !ok || time.Since(o.at) >= scheduler.HeartbeatTimeout {
		return nil
	}
	return o.pending
}

// PendingRuntimes is pendingRuntimes (service.Heartbeats).
func (n *Nodes) PendingRuntimes(id string) []string { return n.pendingRuntimes(id) }

// WarmNodes maps each node with ready warm executions of key to how many it
// has (service.Heartbeats).
func (n *Nodes) WarmNodes(key nodev1.PoolKey) map[string]int { return n.warmNodes(key) }

// knownRuntimes keeps the runtime names this server knows from a node's
// list (a node's heartbeat is trusted to say what it runs, not to grow the
// server's memory with names).
func knownRuntimes(names []string) []string {
	var out []string
	for _, n := range names {
		if (n == "vm" || n == "ns") && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// handleReady is GET /readyz: 200 when the default template is ready and a
// live node offers the default runtime, 503 with what is not otherwise.
// GET /healthz stays liveness: it answers 200 as soon as the server serves.
// Like /healthz it needs no credential (probes), so it names no node and
// no build output.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	out, err := s.svc.Readiness(ctx)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("%w: database: %v", errdefs.ErrUnavailable, err))
		return
	}
	code := http.StatusOK
	if !out.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, out)
}
