// Package service is the control plane's typed operations on sandboxes:
// create, fork, the lifecycle verbs, snapshots, timeouts and deletion,
// each taking a caller and typed parameters and returning domain values
// (sandbox.Sandbox, store.Snapshot) and errdefs-classed errors.
//
// Every surface of the control plane (the native REST API, the E2B API,
// ServicePort ingress) calls these operations; none calls another's HTTP
// handlers. What an operation decides lives here — quota admission, which
// snapshot a fork starts from, the sandbox's interception CA, the store
// writes and the events — and what a transport decides stays in its
// adapter: decoding bodies, Idempotency-Key replays, mapping errors to
// statuses. The package imports no adapter and no net/http handler code
// (deps_test.go keeps it so).
package service

import (
	"context"
	"errors"
	"fmt"
	"github.com/spacesandbox/space/internal/scheduler"
	"log/slog"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/keylock"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// Caller is who asks for an operation: the tenant whose sandboxes it sees
// (another tenant's sandbox is NotFound, exactly like a missing one) and
// whether it holds an admin key; KeyID names the API key for the log
// lines of what it changes.
type Caller struct {
	Tenant string
	Admin  bool
	KeyID  string
}

// Heartbeats is what the operations read of the nodes beyond the store:
// what each node's last heartbeat to this replica said. The control
// plane's node registry implements it.
type Heartbeats interface {
	// PendingRuntimes are the runtimes node id is bringing up (or, in
	// its last heartbeat, offers: the store may not say so yet); nothing
	// when its last heartbeat is not recent.
	PendingRuntimes(id string) []string
	// WarmNodes maps each node with ready warm executions of key to how
	// many it has.
	WarmNodes(key nodev1.PoolKey) map[string]int
	// NodeMemory maps each node heard from recently to its memory as its
	// last heartbeat reported it.
	NodeMemory() map[string]scheduler.Memory
}

// Config is what the operations need to know of the deployment.
type Config struct {
	// DefaultRuntime is the runtime of a create that names none: "vm",
	// "ns", or "auto" (warmup.go).
	DefaultRuntime string
	// RuntimeFallback is what "auto" falls back to when no live node
	// offers vm: "" refuses, "ns" runs on ns with an event saying so.
	RuntimeFallback string
	// WarmupWait bounds how long a create waits for its template and its
	// runtime (0: DefaultWarmupWait).
	WarmupWait time.Duration
	// CreateTimeout bounds how long a create waits for running (0: 5m).
	CreateTimeout time.Duration
	// DefaultEgress is the egress policy of a sandbox created without one
	// (nil: sandbox.DefaultEgress).
	DefaultEgress *egress.Policy
	// Egress pushes a new egress policy to a running execution.
	Egress EgressPusher
	// CAKeys seals each sandbox's interception CA key (ca.go). nil:
	// sandboxes get no CA.
	CAKeys CAKeys
	// Overcommit is the memory overcommit placements admit under (zero:
	// the sum of the sandboxes' limits stays within each node's memory).
	Overcommit scheduler.Overcommit
}

// Sandboxes runs the operations on sandboxes over the store, the
// reconciler that carries them out, and the nodes' heartbeats.
type Sandboxes struct {
	cfg   Config
	log   *slog.Logger
	store store.Store
	rec   *reconcile.Reconciler
	beats Heartbeats
	// egressLocks serialises the egress updates of each sandbox, so that
	// its running execution ends with the policy stored last.
	egressLocks keylock.Map
	// started is when the control plane started: creates wait for a first
	// node only while it warms up (warmup.go).
	started time.Time
	// refusals caps the events of refused lifecycle requests (refusals.go).
	refusals refusals
}

// New returns the operations over st, carried out by rec. started is when
// the control plane started.
func New(cfg Config, st store.Store, rec *reconcile.Reconciler, beats Heartbeats, started time.Time, log *slog.Logger) *Sandboxes {
	if cfg.CreateTimeout == 0 {
		cfg.CreateTimeout = 5 * time.Minute
	}
	if cfg.WarmupWait == 0 {
		cfg.WarmupWait = DefaultWarmupWait
	}
	if cfg.DefaultEgress == nil {
		cfg.DefaultEgress = sandbox.DefaultEgress()
	}
	return &Sandboxes{cfg: cfg, log: log, store: st, rec: rec, beats: beats, started: started}
}

// DefaultEgress is the policy of a sandbox recorded without one.
func (s *Sandboxes) DefaultEgress() *egress.Policy { return s.cfg.DefaultEgress }

// ErrStillWorking says an operation was accepted and is being carried out,
// but its wait ended before the sandbox (or snapshot) settled; the value
// returned with it is the latest record. It is not a failure: the REST API
// answers it 202.
var ErrStillWorking = errors.New("still working")

// lifecycleWait bounds how long an operation waits for its result.
const lifecycleWait = 2 * time.Minute

// Get returns sandbox id of c's tenant. Another tenant's sandbox, and a
// deleted one, are NotFound, exactly like a missing one.
func (s *Sandboxes) Get(ctx context.Context, c Caller, id string) (*sandbox.Sandbox, error) {
	notFound := fmt.Errorf("%w: sandbox %q", errdefs.ErrNotFound, Clip(id))
	if !sandbox.ValidID(id) {
		return nil, notFound
	}
	sb, err := s.store.GetSandbox(ctx, c.Tenant, id)
	if errors.Is(err, errdefs.ErrNotFound) || (err == nil && sb.State == sandbox.StateDeleted) {
		return nil, notFound
	}
	return sb, err
}

// List returns c's tenant's sandboxes that are not deleted.
func (s *Sandboxes) List(ctx context.Context, c Caller) ([]*sandbox.Sandbox, error) {
	sbs, err := s.store.ListSandboxes(ctx, store.SandboxFilter{Tenant: c.Tenant})
	if err != nil {
		return nil, err
	}
	out := sbs[:0]
	for _, sb := range sbs {
		if sb.State != sandbox.StateDeleted {
			out = append(out, sb)
		}
	}
	return out, nil
}

// Event appends an event to sandbox id's, logging (not returning) a failure:
// an event is the record of what happened, never a reason to undo it.
func (s *Sandboxes) Event(ctx context.Context, id, typ, msg string) {
	_, err := s.store.AppendEvent(context.WithoutCancel(ctx), store.Event{SandboxID: id, Time: time.Now().UTC(), Type: typ, Message: msg})
	if err != nil {
		s.log.Warn("append event", "sandbox", id, "err", err)
	}
}

// ValidNodeID reports whether id can name a node: 1-63 of [a-z0-9-].
func ValidNodeID(id string) bool {
	if id == "" || len(id) > 63 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Clip shortens a caller-supplied string for an error message.
func Clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// ByID returns sandbox id whichever its tenant, for a request authorised
// by a per-sandbox token rather than a tenant's key (E2B's envd access
// token). Its caller checks the token first; NotFound for a missing one.
func (s *Sandboxes) ByID(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return s.store.GetSandboxByID(ctx, id)
}

// Running returns every running sandbox, whichever its tenant, for finding
// the one whose per-sandbox token signs a request that names none.
func (s *Sandboxes) Running(ctx context.Context) ([]*sandbox.Sandbox, error) {
	sbs, err := s.store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return nil, err
	}
	out := sbs[:0]
	for _, sb := range sbs {
		if sb.State == sandbox.StateRunning {
			out = append(out, sb)
		}
	}
	return out, nil
}
