package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/postgres"
	"github.com/spacesandbox/space/internal/store/postgres/pgtest"
)

// putNode registers node id in the store as last heard from at hb.
func (h *harness) putNode(id string, hb time.Time) {
	h.t.Helper()
	err := h.st.PutNode(h.ctx, store.Node{
		ID: id, Address: id + ":7071", Runtimes: []string{"ns", "vm"}, State: store.NodeReady,
		Capacity: store.Resources{CPUs: 8, MemoryMiB: 16384, DiskMiB: 100000}, LastHeartbeat: hb.UTC(),
	})
	if err != nil {
		h.t.Fatalf("put node %s: %v", id, err)
	}
}

// report stores node's report as another replica that received its
// heartbeat at `at` would.
func (h *harness) report(node string, at time.Time, execs ...nodev1.Execution) {
	h.t.Helper()
	list, err := ExecutionsJSON(execs)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.st.PutNodeReport(h.ctx, store.NodeReport{Node: node, SealedToken: "sealed", Executions: list, ReportedAt: at.UTC()}); err != nil {
		h.t.Fatalf("put node report: %v", err)
	}
	h.r.sharedMu.Lock()
	h.r.shared = nil // read the store again at the next look
	h.r.sharedMu.Unlock()
}

func TestObservationsFromOtherReplicas(t *testing.T) {
	t.Parallel()
	t.Run("a failure another replica heard fails the sandbox", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, Config{NoRecovery: true}, false)
		sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
		h.putNode("n1", time.Now())
		// This replica heard nothing; the store holds the other's report.
		h.mustPass(sb.ID)
		h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
		dead := exec(sb, nodev1.ExecFailed)
		dead.Reason = "VMM killed"
		h.report("n1", time.Now(), dead)
		h.mustPass(sb.ID)
		got := h.wantState(sb.ID, sandbox.StateFailed, sandbox.StateFailed)
		wantReason(t, got, "VMM killed")
	})
	t.Run("the fresher report wins", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, Config{NoRecovery: true}, false)
		sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
		h.putNode("n1", time.Now())
		// An old report from the store says failed; this replica heard
		// since that it runs.
		h.report("n1", time.Now().Add(-time.Second), exec(sb, nodev1.ExecFailed))
		h.observe("n1", exec(sb, nodev1.ExecRunning))
		h.mustPass(sb.ID)
		h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
		// A newer report from the store says it is gone.
		h.st.backdate(sb.ID, time.Minute)
		h.report("n1", time.Now().Add(time.Second))
		h.mustPass(sb.ID)
		got := h.wantState(sb.ID, sandbox.StateFailed, sandbox.StateFailed)
		wantReason(t, got, "no longer on node n1")
	})
	t.Run("an execution this replica stopped stays stopped", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, Config{}, false)
		sb := h.newSandbox(sandbox.StateFailed, "ns", func(sb *sandbox.Sandbox) { sb.Reason = "boom" })
		h.putNode("n1", time.Now())
		h.report("n1", time.Now(), exec(sb, nodev1.ExecFailed))
		h.mustPass(sb.ID)
		wantCalls(t, h.nodes["n1"], "Stop("+sb.ExecID+")")
		h.r.sharedMu.Lock()
		h.r.shared = nil
		h.r.sharedMu.Unlock()
		// The store's report predates the stop: not held any more.
		if h.r.holds(h.ctx, sb) {
			t.Fatal("an execution stopped after the store's report still counts as held")
		}
	})
}

// replica is one reconciler of a two-replica test, with its own view of
// the nodes (every call lands on the shared fake nodes).
type replica struct {
	r      *Reconciler
	cancel context.CancelFunc
	done   chan struct{}
}

// noRelease is a store whose process never releases its leases: what a
// replica killed mid-pass leaves behind.
type noRelease struct{ store.Store }

func (noRelease) ReleaseLease(context.Context, store.Lease) error { return nil }

// hangingNode is a node whose Start never answers before the caller gives
// up: the replica's pass is stuck in it when the replica dies.
type hangingNode struct {
	*fakeNode
	entered chan struct{}
	once    sync.Once
}

func (n *hangingNode) Start(ctx context.Context, req nodev1.StartExecution) (*nodev1.Execution, error) {
	n.once.Do(func() { close(n.entered) })
	<-ctx.Done()
	return nil, ctx.Err()
}

func startReplica(t *testing.T, h *harness, st store.Store, name string, ttl time.Duration, node func(string) (NodeAPI, error)) *replica {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})).With("replica", name)
	r := New(Config{Resync: 20 * time.Millisecond, LeaseTTL: ttl, Replica: name + "-" + sandbox.NewActivationID()}, st, node, log)
	ctx, cancel := context.WithCancel(h.ctx)
	rep := &replica{r: r, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rep.done)
		_ = r.Run(ctx)
	}()
	t.Cleanup(func() { rep.cancel(); <-rep.done })
	return rep
}

// waitState waits up to 10 s for sandbox id to reach state.
func (h *harness) waitState(id string, state sandbox.State) *sandbox.Sandbox {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sb := h.get(id)
		if sb.State == state {
			return sb
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("sandbox %s is %s (reason %q) after 10s, want %s", id, sb.State, sb.Reason, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMain stops the PostgreSQL server the replica tests start.
func TestMain(m *testing.M) { pgtest.Main(m) }

// forEachBackend runs fn over a fresh SQLite store and a fresh PostgreSQL
// database (replicas of a real deployment share PostgreSQL).
func forEachBackend(t *testing.T, fn func(t *testing.T, h *harness)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, newHarness(t, Config{}, false))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		db, err := postgres.Open(t.Context(), pgtest.Database(t))
		if err != nil {
			t.Fatalf("open postgres store: %v", err)
		}
		t.Cleanup(func() { db.Close() })
		fn(t, newHarnessOn(t, Config{}, false, db))
	})
}

func TestTwoReplicasStartASandboxOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testTwoReplicasStartASandboxOnce)
}

func testTwoReplicasStartASandboxOnce(t *testing.T, h *harness) {
	n1 := h.nodes["n1"]
	// A slow start leaves the other replica every chance to start it too.
	n1.onCall("Start", func() { time.Sleep(200 * time.Millisecond) })
	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	for _, name := range []string{"a", "b"} {
		startReplica(t, h, h.st.Store, name, time.Second, h.node)
	}
	got := h.waitState(sb.ID, sandbox.StateRunning)
	time.Sleep(300 * time.Millisecond) // both replicas look at it again
	if starts := n1.callsTo("Start"); len(starts) != 1 {
		t.Fatalf("node received %d starts (%v), want exactly 1", len(starts), starts)
	}
	if got.Generation != 1 {
		t.Errorf("generation %d, want 1", got.Generation)
	}
}

func TestAReplicaKilledMidPassIsTakenOverAfterTheTTL(t *testing.T) {
	t.Parallel()
	forEachBackend(t, testAReplicaKilledMidPassIsTakenOverAfterTheTTL)
}

func testAReplicaKilledMidPassIsTakenOverAfterTheTTL(t *testing.T, h *harness) {
	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	hang := &hangingNode{fakeNode: h.nodes["n1"], entered: make(chan struct{})}
	const ttl = 600 * time.Millisecond
	a := startReplica(t, h, noRelease{h.st.Store}, "a", ttl, func(string) (NodeAPI, error) { return hang, nil })
	select {
	case <-hang.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("replica a never started the sandbox")
	}
	// Replica a dies in the middle of the start; its lease stays.
	a.cancel()
	<-a.done
	died := time.Now()
	startReplica(t, h, h.st.Store, "b", ttl, h.node)
	got := h.waitState(sb.ID, sandbox.StateRunning)
	starts := h.nodes["n1"].callsTo("Start")
	if len(starts) != 1 {
		t.Fatalf("replica b started %d times, want 1", len(starts))
	}
	if waited := time.Since(died); waited < ttl/2 {
		t.Errorf("replica b took over %s after a died, before a's lease (TTL %s) could have expired", waited, ttl)
	}
	if got.Node != "n1" || got.Generation != 1 {
		t.Errorf("sandbox on %s generation %d, want n1 generation 1", got.Node, got.Generation)
	}
}

func TestALateWriteAfterLosingTheLeaseIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{LeaseTTL: 100 * time.Millisecond, Replica: "a"}, false)
	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	// Replica a holds the lease, then stalls past its TTL (a GC pause, a
	// partition) while replica b takes over.
	l, err := h.st.AcquireLease(h.ctx, leaseName(sb.ID), "a", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(h.ctx)
	defer cancel(nil)
	ctx = context.WithValue(ctx, claimKey{}, &claim{cancel: cancel, lease: l})
	time.Sleep(150 * time.Millisecond)
	if _, err := h.st.AcquireLease(h.ctx, leaseName(sb.ID), "b", time.Minute); err != nil {
		t.Fatalf("replica b: acquire after a's lease expired: %v", err)
	}

	// a's node call is refused before it reaches the node...
	api, err := h.r.node("n1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = api.Start(ctx, nodev1.StartExecution{ExecID: sb.ExecID, SandboxID: sb.ID})
	if !errdefs.IsConflict(err) {
		t.Fatalf("Start after losing the lease: err = %v, want a conflict", err)
	}
	wantCalls(t, h.nodes["n1"])
	if !errors.Is(context.Cause(ctx), errLeaseLost) {
		t.Errorf("pass context cause = %v, want the lease lost", context.Cause(ctx))
	}
	// ...and so is its write of the sandbox, even from a context the
	// lost lease did not cancel.
	ctx2, cancel2 := context.WithCancelCause(h.ctx)
	defer cancel2(nil)
	ctx2 = context.WithValue(ctx2, claimKey{}, &claim{cancel: cancel2, lease: l})
	late := h.get(sb.ID)
	late.State = sandbox.StateRunning
	if _, err := h.r.update(ctx2, late); !errdefs.IsConflict(err) {
		t.Fatalf("update after losing the lease: err = %v, want a conflict", err)
	}
	h.wantState(sb.ID, sandbox.StateCreating, sandbox.StateRunning)
}

func TestAPassHeldByAnotherReplicaIsSkipped(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	if _, err := h.st.AcquireLease(h.ctx, leaseName(sb.ID), "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	after, err := h.r.claimed(h.ctx, sb.ID)
	if err != nil || after <= 0 {
		t.Fatalf("claimed = %v, %v; want a requeue without error", after, err)
	}
	wantCalls(t, h.nodes["n1"])
	h.wantState(sb.ID, sandbox.StateCreating, sandbox.StateRunning)
}

// TestObservedExecutionsOfAgreesWithObservations: the executions of one
// sandbox that stopPrevious looks up without copying every observation are
// those of the freshest observation of each node (another replica's
// report or this replica's own), less what this replica stopped since.
func TestObservedExecutionsOfAgreesWithObservations(t *testing.T) {
	h := newHarness(t, Config{}, false)
	ex := func(sb, id string) nodev1.Execution {
		return nodev1.Execution{ExecID: id, SandboxID: sb, Runtime: "ns", State: nodev1.ExecRunning}
	}
	now := time.Now()
	for _, n := range []string{"n1", "n2", "n3"} {
		h.putNode(n, now)
	}
	// n1: another replica's report is fresher than this replica's.
	h.observe("n1", ex("sb1", "sb1-g1-own"), ex("sb2", "sb2-g1-a"))
	h.report("n1", now.Add(time.Minute), ex("sb1", "sb1-g2-shared"), ex("sb2", "sb2-g1-a"))
	// n2: this replica's own observation is the fresher.
	h.report("n2", now.Add(-time.Hour), ex("sb1", "sb1-g1-stale"))
	h.observe("n2", ex("sb1", "sb1-g3-n2"))
	// n3: only a report, one of whose executions this replica stopped since.
	h.report("n3", now.Add(-time.Second), ex("sb1", "sb1-g4-n3"), ex("sb1", "sb1-g1-stopped"), ex("sb3", "sb3-g1-x"))
	h.r.forget("n3", "sb1-g1-stopped")

	for _, sb := range []string{"sb1", "sb2", "sb3", "sb4"} {
		want := map[string][]string{}
		for node, obs := range h.r.observations(h.ctx) {
			for id, e := range obs.executions {
				if e.SandboxID == sb {
					want[node] = append(want[node], id)
				}
			}
		}
		got := h.r.observedExecutionsOf(h.ctx, sb)
		for _, m := range []map[string][]string{want, got} {
			for _, ids := range m {
				slices.Sort(ids)
			}
		}
		if !maps.EqualFunc(got, want, slices.Equal[[]string]) {
			t.Errorf("%s: observedExecutionsOf = %v, observations say %v", sb, got, want)
		}
	}
	want := map[string][]string{"n1": {"sb1-g2-shared"}, "n2": {"sb1-g3-n2"}, "n3": {"sb1-g4-n3"}}
	if got := h.r.observedExecutionsOf(h.ctx, "sb1"); !maps.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Errorf("sb1's executions = %v, want %v", got, want)
	}
}
