// Package reconcile drives every sandbox's observed state toward its desired
// state. It is level-based: each pass reads the sandbox from the store and what
// its node last reported, decides one step, and either finishes or asks to be
// requeued. Nothing is remembered between passes except the work queue, so a
// crashed and restarted control plane picks up exactly where the data says.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
	"github.com/spacesandbox/space/internal/retention"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/scheduler"
	"github.com/spacesandbox/space/internal/store"
)

// NodeAPI is what the reconciler needs of a node.
type NodeAPI interface {
	Start(ctx context.Context, req nodev1.StartExecution) (*nodev1.Execution, error)
	Stop(ctx context.Context, execID string) error
	Pause(ctx context.Context, execID string) error
	Resume(ctx context.Context, execID string) error
	Snapshot(ctx context.Context, execID string, req nodev1.TakeSnapshot) (*nodev1.Snapshot, error)
	DeleteSnapshot(ctx context.Context, id string) error
	Upload(ctx context.Context, id string, req nodev1.UploadSnapshot) (*nodev1.Artifacts, error)
	Download(ctx context.Context, id string, req nodev1.DownloadSnapshot) (*nodev1.Snapshot, error)
	EnsureTemplate(ctx context.Context, name, source string) (*nodev1.TemplateReady, error)
}

// Config tunes a reconciler.
type Config struct {
	// Workers is how many sandboxes are reconciled at once.
	Workers int
	// Resync is how often every sandbox is looked at even without news.
	Resync time.Duration
	// StartTimeout bounds the creation of one execution.
	StartTimeout time.Duration
	// OrphanGrace is how long an execution without a sandbox may live on a
	// node before it is stopped.
	OrphanGrace time.Duration
	// NoRecovery turns crash recovery off: a sandbox whose execution dies
	// fails instead of coming back from its latest snapshot.
	NoRecovery bool
	// Objects is the object store hibernated snapshots live in: the
	// reconciler verifies what a node uploaded and deletes what a deleted
	// sandbox left. Without it hibernate is refused.
	Objects objstore.Store
	// Schedule is how often running sandboxes are snapshotted (disk, and
	// full for vm); zero periods turn it off. Retention prunes the
	// scheduled snapshots.
	Schedule  retention.Schedule
	Retention retention.Policy
	// UploadRetry is how long a hibernation retries an object store that
	// does not answer before it gives up (the sandbox stays paused).
	UploadRetry time.Duration
	// ProgressEvery is the least time between two "progress" events of a
	// snapshot's upload or download (0: 2 s); the last always comes.
	ProgressEvery time.Duration
	// Replica names this process in the leases its passes run under
	// (claim.go); it must be unique per process incarnation. "":
	// NewReplicaID().
	Replica string
	// LeaseTTL is how long a pass's lease lasts without renewal (0:
	// DefaultLeaseTTL): how long other replicas wait for a replica that
	// died mid-pass, unless the store tells them it is gone (presence.go).
	LeaseTTL time.Duration
	// SingleReplica says no other replica shares the store (SQLite: one
	// server owns the file), so passes run without leases — each lease is
	// a write, and a single writer pays for them on every create.
	SingleReplica bool
	// NodeLostAfter is how long a node may be silent before it is declared
	// lost and its sandboxes recovered elsewhere (0: DefaultNodeLostAfter;
	// negative: never).
	NodeLostAfter time.Duration
	// TenantKey returns the tenant's KMS key id for new artifacts (creating
	// it on first use).
	TenantKey func(ctx context.Context, tenant string) (string, error)
	// Overcommit is the memory overcommit a recovery placement admits
	// under (zero: none), as a create's does.
	Overcommit scheduler.Overcommit
	// NodeMemory is each node's memory as its heartbeats report it
	// (service.Heartbeats.NodeMemory): a node under memory pressure takes
	// no recovered sandbox. nil: every node unreported.
	NodeMemory func() map[string]scheduler.Memory
}

// Reconciler is the control plane's reconciler.
type Reconciler struct {
	cfg   Config
	store store.Store
	node  func(id string) (NodeAPI, error)
	log   *slog.Logger
	q     *queue
	// defaultEgress is the policy sent for sandboxes that have none of
	// their own (recorded before egress policies existed); nil: the
	// built-in default.
	defaultEgress atomic.Pointer[egress.Policy]
	// ca supplies each start's interception CA (SetCA); nil: none.
	ca atomic.Pointer[CAFunc]
	// onDelete runs at each delete (SetOnDelete); nil: nothing.
	onDelete atomic.Pointer[DeleteFunc]

	// watchMu guards watchers alone: every create waits on a Watch, and
	// a burst's creates must not queue behind r.mu, which a pass holds
	// while it copies a node's observation.
	watchMu  sync.Mutex
	watchers map[string]map[*Watch]struct{}
	// hints say which sandboxes the last resync found no unsettled
	// snapshot of (unsettled.go).
	hints *snapshotHints
	mu    sync.Mutex // guards observed, gone and thawed
	// observed is what each node last reported to this replica.
	observed map[string]observation
	// gone holds when this replica stopped an execution (observe.go).
	gone map[string]time.Time
	// thawed holds when this replica resumed a fenced execution
	// (fence.go): reports from before then still say fenced.
	thawed map[string]time.Time

	sharedMu sync.Mutex // guards shared and sharedAt
	// shared is the store's node reports as last read, at sharedAt.
	shared   map[string]observation
	sharedAt time.Time

	// started is when New made the reconciler: nodes are not declared lost
	// before it has listened for their heartbeats for NodeLostAfter.
	started time.Time
	// clock notices wall-clock jumps, which hold the decisions that
	// depend on wall time (clock.go).
	clock *wallWatch
	// storeFailed is when a resync last failed to read the store (Unix
	// nanoseconds; 0: never): nodes are not declared lost before the
	// store has worked for NodeLostAfter since (nodeloss.go).
	storeFailed atomic.Int64
	// presentSince is since when this replica has held its presence
	// without a break (Unix nanoseconds; 0: not present); presence.go.
	presentSince atomic.Int64
}

type observation struct {
	at         time.Time
	executions map[string]nodev1.Execution
}

// New returns a reconciler; node resolves a node id to its API.
func New(cfg Config, st store.Store, node func(id string) (NodeAPI, error), log *slog.Logger) *Reconciler {
	if cfg.Workers == 0 {
		cfg.Workers = 16
	}
	if cfg.Resync == 0 {
		cfg.Resync = 2 * time.Second
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 5 * time.Minute
	}
	if len(cfg.Retention.Tiers) == 0 {
		cfg.Retention = retention.DefaultPolicy()
	}
	if cfg.UploadRetry == 0 {
		cfg.UploadRetry = 20 * time.Second
	}
	if cfg.ProgressEvery == 0 {
		cfg.ProgressEvery = 2 * time.Second
	}
	if cfg.OrphanGrace == 0 {
		cfg.OrphanGrace = 30 * time.Second
	}
	if cfg.Replica == "" {
		cfg.Replica = NewReplicaID()
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.NodeLostAfter == 0 {
		cfg.NodeLostAfter = DefaultNodeLostAfter
	}
	r := &Reconciler{
		cfg: cfg, store: st, log: log, q: newQueue(),
		watchers: map[string]map[*Watch]struct{}{}, observed: map[string]observation{}, gone: map[string]time.Time{},
		thawed: map[string]time.Time{}, hints: newSnapshotHints(),
		started: time.Now(), clock: newWallWatch(),
	}
	r.node = func(id string) (NodeAPI, error) {
		api, err := node(id)
		if err != nil {
			return nil, err
		}
		return fencedNode{r: r, api: api}, nil
	}
	return r
}

// SetDefaultEgress sets the egress policy of sandboxes that have none of
// their own (they were recorded before sandboxes had egress policies): the
// server's default, so that they follow --default-egress like new ones.
// nil restores the built-in default, sandbox.DefaultEgress.
func (r *Reconciler) SetDefaultEgress(p *egress.Policy) { r.defaultEgress.Store(p) }

// DefaultEgress returns the policy SetDefaultEgress set, or the built-in
// default.
func (r *Reconciler) DefaultEgress() *egress.Policy {
	if p := r.defaultEgress.Load(); p != nil {
		return p
	}
	return sandbox.DefaultEgress()
}

// Enqueue asks for a pass over sandbox id. Whoever wrote one of its
// snapshot rows must call it after the write (unsettled.go).
func (r *Reconciler) Enqueue(id string) {
	r.hints.touch(id)
	r.q.add(id)
}

// Watch is a subscription to changes of one sandbox.
type Watch struct {
	// C receives a value after the sandbox changed.
	C    chan struct{}
	stop func()
}

// Stop ends the subscription.
func (w *Watch) Stop() { w.stop() }

// Watch subscribes to changes the reconciler makes to sandbox id.
func (r *Reconciler) Watch(id string) *Watch {
	w := &Watch{C: make(chan struct{}, 1)}
	r.watchMu.Lock()
	if r.watchers[id] == nil {
		r.watchers[id] = map[*Watch]struct{}{}
	}
	r.watchers[id][w] = struct{}{}
	r.watchMu.Unlock()
	w.stop = func() {
		r.watchMu.Lock()
		delete(r.watchers[id], w)
		if len(r.watchers[id]) == 0 {
			delete(r.watchers, id)
		}
		r.watchMu.Unlock()
	}
	return w
}

func (r *Reconciler) notify(id string) {
	r.watchMu.Lock()
	defer r.watchMu.Unlock()
	for w := range r.watchers[id] {
		select {
		case w.C <- struct{}{}:
		default:
		}
	}
}

// Observe records what a node reports running and queues the sandboxes
// concerned.
func (r *Reconciler) Observe(nodeID string, execs []nodev1.Execution) {
	m := make(map[string]nodev1.Execution, len(execs))
	for _, ex := range execs {
		m[ex.ExecID] = ex
	}
	r.mu.Lock()
	r.observed[nodeID] = observation{at: time.Now(), executions: m}
	r.mu.Unlock()
	for _, ex := range execs {
		if ex.State == nodev1.ExecFailed || ex.Fenced {
			r.Enqueue(ex.SandboxID)
		}
	}
}

// Run reconciles until ctx is done.
func (r *Reconciler) Run(ctx context.Context) error {
	defer r.holdPresence(ctx)() // presence.go: held until the workers are done
	var wg sync.WaitGroup
	for range r.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.work(ctx)
		}()
	}
	// The object GC has its own goroutine: a slow or hung object store
	// must not hold up the resync.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.sweepObjectsEvery(ctx, objectGCEvery)
	}()
	t := time.NewTicker(r.cfg.Resync)
	defer t.Stop()
	r.resync(ctx)
	for {
		select {
		case <-ctx.Done():
			r.q.close()
			wg.Wait()
			return nil
		case <-t.C:
			r.resync(ctx)
		}
	}
}

func (r *Reconciler) work(ctx context.Context) {
	for {
		id, ok := r.q.get()
		if !ok {
			return
		}
		r.process(ctx, id)
	}
}

// process runs the pass over sandbox id that the queue handed out, and
// requeues it as the pass asks.
func (r *Reconciler) process(ctx context.Context, id string) {
	var after time.Duration
	var err error
	if r.cfg.SingleReplica {
		after, err = r.reconcile(ctx, id)
	} else {
		after, err = r.claimed(ctx, id)
	}
	r.hints.touch(id) // the pass may have written its snapshot rows
	if err != nil && ctx.Err() == nil {
		r.log.Warn("reconcile", "sandbox", id, "err", err)
		if after == 0 {
			after = time.Second
		}
	}
	r.q.done(id)
	if after > 0 {
		r.q.addAfter(id, after)
	}
	r.notify(id)
}

// resync queues every sandbox that may need work and stops orphan executions.
// Two store reads whatever the number of sandboxes: the sandboxes, and the
// snapshots that still ask for work (unsettled.go).
func (r *Reconciler) resync(ctx context.Context) {
	sbs, err := r.store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		if ctx.Err() == nil {
			r.storeFailed.Store(time.Now().UnixNano())
			r.log.Warn("reconcile resync", "err", err)
		}
		return
	}
	r.hints.begin()
	unsettled, err := r.store.ListUnsettledSnapshots(ctx)
	listed := err == nil
	if err != nil && ctx.Err() == nil {
		// Not fatal: every pass lists its own snapshots, as without hints.
		r.log.Warn("reconcile resync: unsettled snapshots", "err", err)
	}
	view := &resyncView{}
	if nodes, err := r.store.ListNodes(ctx); err == nil {
		view.nodes = make(map[string]store.Node, len(nodes))
		for _, n := range nodes {
			view.nodes[n.ID] = n
		}
	}
	owes := make(map[string]bool, len(unsettled))
	for _, sn := range unsettled {
		owes[sn.SandboxID] = true
	}
	current := map[string]bool{}
	var queue, quiet []string
	for _, sb := range sbs {
		current[sb.ExecID] = true
		if sb.State == sandbox.StateFailed && !r.holds(ctx, sb) {
			continue // nothing left to release
		}
		if !listed || owes[sb.ID] {
			queue = append(queue, sb.ID)
			continue
		}
		if mayNeedWork(sb) {
			queue, quiet = append(queue, sb.ID), append(quiet, sb.ID)
		}
	}
	r.hints.end(quiet, view, listed)
	for _, id := range queue {
		r.q.add(id) // not Enqueue: that would drop the hints just set
	}
	r.stopOrphans(ctx, current)
	r.declareLostNodes(ctx, sbs)
}

// mayNeedWork reports whether a pass over sb, which owes no snapshot any
// work, could do anything: not for a stopped or hibernated sandbox that
// stays so (not moved by a drain, the clock not past its timeout; its pass
// would read it and return). Every other state looks at its execution, its
// node or the clock on every pass.
func mayNeedWork(sb *sandbox.Sandbox) bool {
	switch sb.State {
	case sandbox.StateStopped, sandbox.StateHibernated:
		moving := sb.Desired == sandbox.StateRunning || sb.Desired == sandbox.StatePaused
		return moving || sb.Expired(time.Now())
	}
	return true
}

// holds reports whether sb's node still reports its execution.
func (r *Reconciler) holds(ctx context.Context, sb *sandbox.Sandbox) bool {
	obs, _ := r.observationOf(ctx, sb.Node, sb.ExecID)
	_, ok := obs.executions[sb.ExecID]
	return ok
}

func (r *Reconciler) stopOrphans(ctx context.Context, current map[string]bool) {
	var orphans []struct{ node, exec string }
	for nodeID, obs := range r.observations(ctx) {
		for id, ex := range obs.executions {
			if !current[id] && time.Since(ex.StartedAt) > r.cfg.OrphanGrace {
				orphans = append(orphans, struct{ node, exec string }{nodeID, id})
			}
		}
	}
	lost := map[string]bool{}
	for _, o := range orphans {
		isLost, known := lost[o.node]
		if !known {
			_, isLost = r.lostNode(ctx, o.node)
			lost[o.node] = isLost
		}
		if isLost {
			continue // its last report is stale; retired when it comes back
		}
		api, err := r.node(o.node)
		if err != nil {
			continue
		}
		r.log.Info("stopping orphan execution", "node", o.node, "exec", o.exec)
		if err := api.Stop(ctx, o.exec); err != nil {
			r.log.Warn("stop orphan execution", "node", o.node, "exec", o.exec, "err", err)
			continue
		}
		r.forget(o.node, o.exec)
	}
}

// reconcile makes one step for sandbox id. It returns when to look again (0:
// only on news) and an error worth logging.
func (r *Reconciler) reconcile(ctx context.Context, id string) (time.Duration, error) {
	view := r.hints.take(id)
	quiet := view != nil
	if quiet {
		ctx = withResyncView(ctx, view)
	}
	sb, err := r.store.GetSandboxByID(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return r.dropRequestsOfGone(ctx, id)
	}
	if err != nil {
		return time.Second, err
	}
	// quiet: the resync's listing found nothing for pendingSnapshots, and
	// nothing wrote a snapshot row of sb since (unsettled.go).
	if !quiet {
		if after, err := r.pendingSnapshots(ctx, sb); after != 0 || err != nil {
			return after, err
		}
	}
	if now, steady := r.wallNow(); steady && sb.Expired(now) && !sb.State.Transitional() && sb.State != sandbox.StateDeleted {
		// The timeout applies in every settled state, not only running.
		if err := sb.Apply(sandbox.OpDelete); err == nil {
			r.event(ctx, sb.ID, "state", "timeout reached: deleting")
			after, err := r.update(ctx, sb)
			if err == nil && after == 0 {
				after = time.Millisecond
			}
			return after, err
		}
	}
	if after, done, err := r.drainStep(ctx, sb); done {
		return after, err
	}
	switch sb.State {
	case sandbox.StateCreating, sandbox.StateRestoring, sandbox.StateRecovering:
		return r.startExecution(ctx, sb)
	case sandbox.StateRunning:
		return r.checkRunning(ctx, sb)
	case sandbox.StatePaused:
		return r.checkPaused(ctx, sb)
	case sandbox.StatePausing, sandbox.StateResuming:
		return r.pauseResume(ctx, sb)
	case sandbox.StateStopping:
		return r.stopSandbox(ctx, sb)
	case sandbox.StateHibernating:
		return r.hibernateSandbox(ctx, sb)
	case sandbox.StateDeleting:
		return r.deleteSandbox(ctx, sb)
	case sandbox.StateFailed:
		return r.releaseFailed(ctx, sb)
	}
	return 0, nil
}

func (r *Reconciler) event(ctx context.Context, id, typ, msg string) {
	if _, err := r.store.AppendEvent(ctx, store.Event{SandboxID: id, Time: time.Now().UTC(), Type: typ, Message: msg}); err != nil {
		r.log.Warn("append event", "sandbox", id, "err", err)
	}
}

// updateWithEvent writes sb as update does and, once written, the event
// typ/msg: in the same transaction where the store can
// (store.SandboxEvents), so a settled create costs one commit.
func (r *Reconciler) updateWithEvent(ctx context.Context, sb *sandbox.Sandbox, typ, msg string) (time.Duration, error) {
	se, ok := r.store.(store.SandboxEvents)
	if !ok {
		after, err := r.update(ctx, sb)
		if err == nil && after == 0 {
			r.event(ctx, sb.ID, typ, msg)
		}
		return after, err
	}
	if err := r.fence(ctx); err != nil {
		return time.Second, fmt.Errorf("sandbox %s: update: %w", sb.ID, err)
	}
	err := se.UpdateSandboxAndEvents(ctx, sb, []store.Event{{SandboxID: sb.ID, Time: time.Now().UTC(), Type: typ, Message: msg}})
	if errors.Is(err, errdefs.ErrConflict) {
		return time.Millisecond, nil
	}
	if err != nil {
		return time.Second, fmt.Errorf("sandbox %s: update: %w", sb.ID, err)
	}
	return 0, nil
}

// update writes sb; a version conflict means someone else moved it, and the
// next pass (queued at once) reads the news.
func (r *Reconciler) update(ctx context.Context, sb *sandbox.Sandbox) (time.Duration, error) {
	if err := r.fence(ctx); err != nil {
		return time.Second, fmt.Errorf("sandbox %s: update: %w", sb.ID, err)
	}
	err := r.store.UpdateSandbox(ctx, sb)
	if errors.Is(err, errdefs.ErrConflict) {
		return time.Millisecond, nil
	}
	if err != nil {
		return time.Second, fmt.Errorf("sandbox %s: update: %w", sb.ID, err)
	}
	return 0, nil
}
