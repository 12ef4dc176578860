package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/metrics"
)

// Stream leases. Every request the node forwards to a guest (exec output, a
// PTY, a file watch, a transfer) holds a lease on the execution that serves
// it; retiring or stopping the execution cancels its leases, so input and
// output stop at once instead of running on against an execution that no
// longer owns the sandbox.

// DefaultMaxStreamsPerExecution is how many requests the node forwards to
// one execution at once (guest routes, port ingress, TCP tunnels). Each
// costs the node a goroutine, buffers and a connection (an fd), so a client
// opening ten thousand watches or tunnels into one sandbox gets refusals,
// not the node's fd table or memory, and other executions are untouched.
const DefaultMaxStreamsPerExecution = 1024

// Surfaces of a forwarded request: the surface label of
// space_node_streams_refused_total.
const (
	surfaceGuest    = "guest"     // a public guest route through the host bridge
	surfacePortHTTP = "port_http" // HTTP ingress to a guest port
	surfacePortTCP  = "port_tcp"  // a TCP tunnel to a guest port
)

var streamSurfaces = []string{surfaceGuest, surfacePortHTTP, surfacePortTCP}

// leases tracks the in-flight forwarded requests per execution.
type leases struct {
	mu sync.Mutex
	m  map[string]map[*lease]struct{}
	// max bounds the leases of one execution (0: DefaultMaxStreamsPerExecution).
	max int
	// refused counts the requests refused over max, by surface (nil: not counted).
	refused *metrics.CounterVec
}

type lease struct {
	cancel context.CancelCauseFunc
}

// acquire returns a context for a request of surface to execID, cancelled
// when the execution is retired or stopped, and the release to call when
// done. With max leases held on execID already it is refused with
// errdefs.ErrTooManyStreams (429 too_many_streams) and counted.
func (l *leases) acquire(ctx context.Context, surface, execID string) (context.Context, func(), error) {
	max := l.max
	if max <= 0 {
		max = DefaultMaxStreamsPerExecution
	}
	l.mu.Lock()
	if len(l.m[execID]) >= max {
		l.mu.Unlock()
		if l.refused != nil {
			l.refused.Inc(surface)
		}
		return nil, nil, fmt.Errorf("%w: exec %s has %d requests in flight on this node (exec sessions, watches, transfers, port connections), the most it may; close one or wait for one to end",
			errdefs.ErrTooManyStreams, execID, max)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	ls := &lease{cancel: cancel}
	if l.m == nil {
		l.m = map[string]map[*lease]struct{}{}
	}
	if l.m[execID] == nil {
		l.m[execID] = map[*lease]struct{}{}
	}
	l.m[execID][ls] = struct{}{}
	l.mu.Unlock()
	return ctx, func() {
		l.mu.Lock()
		delete(l.m[execID], ls)
		if len(l.m[execID]) == 0 {
			delete(l.m, execID)
		}
		l.mu.Unlock()
		cancel(nil)
	}, nil
}

// revoke cancels every lease on execID with cause and returns how many.
func (l *leases) revoke(execID string, cause error) int {
	l.mu.Lock()
	held := l.m[execID]
	delete(l.m, execID)
	l.mu.Unlock()
	for ls := range held {
		ls.cancel(cause)
	}
	return len(held)
}

// count reports the leases held on execID.
func (l *leases) count(execID string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m[execID])
}

// Retire marks executions as no longer serving their sandbox: from now on
// their capabilities get RefreshRoute, and their streams are cut. Unknown
// executions are ignored; retiring twice keeps the first record.
func (m *Manager) Retire(rs []nodev1.Retirement) {
	for _, r := range rs {
		if validSandboxExecID(r.ExecID) != nil {
			continue
		}
		m.retire(r.ExecID, r.SandboxID, r.Generation)
	}
}

func (m *Manager) retire(execID, sandboxID string, by uint64) {
	unlock := m.locks.Lock(execID)
	rec, err := m.records.load(execID)
	if err != nil || rec.SandboxID != sandboxID || rec.Retired {
		// Unknown, another sandbox's, or retired already (the control
		// plane repeats retirements until the execution is gone).
		unlock()
		return
	}
	rec.Retired, rec.RetiredBy = true, by
	if err := m.records.save(rec); err != nil {
		m.log.Warn("record retirement", "exec", execID, "err", err)
	}
	unlock()
	cause := fmt.Errorf("execution %s of sandbox %s was retired (generation %d serves it now)", execID, sandboxID, by)
	if by == 0 {
		cause = fmt.Errorf("execution %s was retired: sandbox %s is gone", execID, sandboxID)
	}
	if bc, berr := m.bridge(rec); berr == nil {
		// The bridge refuses the retired execution's requests too.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if perr := bc.post(ctx, "/bridge/v1/retire"); perr != nil {
			m.log.Warn("tell the host bridge of a retirement", "exec", execID, "err", perr)
		}
		cancel()
	}
	n := m.streams.revoke(execID, cause)
	m.log.Info("execution retired", "exec", execID, "sandbox", sandboxID, "by_generation", by, "streams_cut", n)
}

// retireOlder retires the executions of req's sandbox on this node that
// belong to an older generation: a newer one is being installed here.
func (m *Manager) retireOlder(req nodev1.StartExecution) {
	if req.Generation <= 1 {
		return // a new sandbox: nothing older can be here (and reading every record costs)
	}
	recs, _ := m.records.all()
	for _, rec := range recs {
		if rec.SandboxID == req.SandboxID && rec.ExecID != req.ExecID && rec.Generation < req.Generation {
			m.retire(rec.ExecID, rec.SandboxID, req.Generation)
		}
	}
}
