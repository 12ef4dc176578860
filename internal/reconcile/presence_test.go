package reconcile

import (
	"context"
	"errors"
	"log/slog"
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

// longTTL is the lease TTL of the tests below: far longer than they wait,
// so that only a takeover explains a lease changing hands in time.
const longTTL = time.Minute

// openPostgres opens a store on a fresh database of the shared server.
func openPostgres(t *testing.T) *postgres.Store {
	t.Helper()
	db, err := postgres.Open(t.Context(), pgtest.Database(t))
	if err != nil {
		t.Fatalf("open postgres store: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// keepsLeases is a replica's PostgreSQL store (presence included) whose
// process never releases a lease: what a replica killed mid-pass leaves.
type keepsLeases struct{ *postgres.Store }

func (keepsLeases) ReleaseLease(context.Context, store.Lease) error { return nil }

// waitStateWithin waits up to d for sandbox id to reach state.
func (h *harness) waitStateWithin(id string, state sandbox.State, d time.Duration) *sandbox.Sandbox {
	h.t.Helper()
	deadline := time.Now().Add(d)
	for {
		sb := h.get(id)
		if sb.State == state {
			return sb
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("sandbox %s is %s (reason %q) after %v, want %s", id, sb.State, sb.Reason, d, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestADeadReplicasLeaseIsTakenOverBeforeItExpires: replica a dies (its
// reconciler stops: its presence ends and its renewals stop) in the middle
// of a start, holding the sandbox's lease for another minute. Replica b
// takes the lease over and starts the sandbox within seconds.
func TestADeadReplicasLeaseIsTakenOverBeforeItExpires(t *testing.T) {
	t.Parallel()
	db := openPostgres(t)
	h := newHarnessOn(t, Config{}, false, db)
	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	hang := &hangingNode{fakeNode: h.nodes["n1"], entered: make(chan struct{})}
	a := startReplica(t, h, keepsLeases{db}, "a", longTTL, func(string) (NodeAPI, error) { return hang, nil })
	select {
	case <-hang.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("replica a never started the sandbox")
	}
	if a.r.presentSince.Load() == 0 {
		t.Fatal("replica a ran its pass without presence") // Run waits for it
	}
	a.cancel()
	<-a.done
	died := time.Now()
	if l, err := db.AcquireLease(h.ctx, leaseName(sb.ID), "probe", longTTL); !errdefs.IsConflict(err) {
		t.Fatalf("the dead replica's lease: acquire = %+v, %v; want it still held", l, err)
	}

	startReplica(t, h, db, "b", longTTL, h.node)
	// b waits presenceSettle before it takes anything over; then at most
	// a resync (20 ms) and a pass. Generous, and still half the TTL.
	got := h.waitStateWithin(sb.ID, sandbox.StateRunning, longTTL/2)
	t.Logf("replica b started the sandbox %v after replica a died (lease TTL %v)", time.Since(died).Round(time.Millisecond), longTTL)
	if starts := h.nodes["n1"].callsTo("Start"); len(starts) != 1 {
		t.Fatalf("node received %d starts from replica b (%v), want 1", len(starts), starts)
	}
	if got.Node != "n1" || got.Generation != 1 {
		t.Errorf("sandbox on %s generation %d, want n1 generation 1", got.Node, got.Generation)
	}
}

// TestALiveReplicaWithoutPresenceLosesItsLeaseHarmlessly: replica a is
// alive and holds the lease, but its presence is gone (its presence
// connection broke and has not come back). Replica b takes the lease over
// and drives the sandbox; a's next node call and write are refused and its
// pass is canceled, so the takeover costs a nothing but the pass.
func TestALiveReplicaWithoutPresenceLosesItsLeaseHarmlessly(t *testing.T) {
	t.Parallel()
	db := openPostgres(t)
	const replicaA = "a-live"
	h := newHarnessOn(t, Config{Replica: replicaA, LeaseTTL: longTTL}, false, db)
	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)

	// a is present, and holds the sandbox's lease mid-pass.
	presence := holdPresenceFor(t, db, replicaA)
	l, err := db.AcquireLease(h.ctx, leaseName(sb.ID), replicaA, longTTL)
	if err != nil {
		t.Fatal(err)
	}
	ctxA, cancelA := context.WithCancelCause(h.ctx)
	defer cancelA(nil)
	ctxA = context.WithValue(ctxA, claimKey{}, &claim{cancel: cancelA, lease: l})

	b := New(Config{Replica: "b", LeaseTTL: longTTL}, db, h.node, slog.New(slog.NewTextHandler(t.Output(), nil)).With("replica", "b"))
	stopB := b.holdPresence(h.ctx)
	defer stopB()
	waitSettled(t, b)

	// While a is present, b leaves its lease alone.
	if after, err := b.claimed(h.ctx, sb.ID); err != nil || after <= 0 {
		t.Fatalf("b's pass while a is present: %v, %v; want skipped and requeued", after, err)
	}
	wantCalls(t, h.nodes["n1"])

	// a's presence ends; a lives on. b takes the lease over and drives
	// the sandbox.
	presence()
	waitAbsent(t, db, replicaA)
	if _, err := b.claimed(h.ctx, sb.ID); err != nil {
		t.Fatalf("b's pass once a is gone: %v", err)
	}
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	if starts := h.nodes["n1"].callsTo("Start"); len(starts) != 1 {
		t.Fatalf("starts after b's pass: %v, want 1", starts)
	}

	// a's late node call is refused before it reaches the node...
	api, err := h.r.node("n1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = api.Start(ctxA, nodev1.StartExecution{ExecID: sb.ExecID, SandboxID: sb.ID})
	if !errdefs.IsConflict(err) {
		t.Fatalf("a's Start after its lease was taken over: err = %v, want a conflict", err)
	}
	if starts := h.nodes["n1"].callsTo("Start"); len(starts) != 1 {
		t.Errorf("starts after a's late call: %v, want still 1", starts)
	}
	if !errors.Is(context.Cause(ctxA), errLeaseLost) {
		t.Errorf("a's pass context cause = %v, want the lease lost", context.Cause(ctxA))
	}
	// ...and so is its write, made from what it read before b's pass.
	ctxA2, cancelA2 := context.WithCancelCause(h.ctx)
	defer cancelA2(nil)
	ctxA2 = context.WithValue(ctxA2, claimKey{}, &claim{cancel: cancelA2, lease: l})
	late := h.get(sb.ID)
	late.State, late.Reason = sandbox.StateFailed, "a's late write"
	if _, err := h.r.update(ctxA2, late); !errdefs.IsConflict(err) {
		t.Fatalf("a's write after its lease was taken over: err = %v, want a conflict", err)
	}
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
}

// TestNoTakeoverWithoutOwnPresence: a replica that is not present itself
// (after a database outage, say) does not take leases over from replicas
// that are not present either.
func TestNoTakeoverWithoutOwnPresence(t *testing.T) {
	t.Parallel()
	db := openPostgres(t)
	h := newHarnessOn(t, Config{}, false, db)
	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	if _, err := db.AcquireLease(h.ctx, leaseName(sb.ID), "gone", longTTL); err != nil {
		t.Fatal(err)
	}
	b := New(Config{Replica: "b", LeaseTTL: longTTL}, db, h.node, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if after, err := b.claimed(h.ctx, sb.ID); err != nil || after <= 0 {
		t.Fatalf("pass of a replica without presence: %v, %v; want skipped and requeued", after, err)
	}
	wantCalls(t, h.nodes["n1"])
	// Once present (and settled), it does.
	stop := b.holdPresence(h.ctx)
	defer stop()
	waitSettled(t, b)
	if _, err := b.claimed(h.ctx, sb.ID); err != nil {
		t.Fatalf("pass of a present replica: %v", err)
	}
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
}

// holdPresenceFor makes replica present on db until the returned function
// (or the test's end) ends it.
func holdPresenceFor(t *testing.T, db *postgres.Store, replica string) (end func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	present := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	wg.Go(func() {
		db.HoldPresence(ctx, replica, func(p bool, cause error) {
			if p {
				once.Do(func() { close(present) })
			}
		})
	})
	var stopOnce sync.Once
	end = func() { stopOnce.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(end)
	select {
	case <-present:
	case <-time.After(10 * time.Second):
		t.Fatalf("replica %s not present after 10s", replica)
	}
	return end
}

// waitSettled waits until r may take leases over.
func waitSettled(t *testing.T, r *Reconciler) {
	t.Helper()
	deadline := time.Now().Add(presenceSettle + 10*time.Second)
	for !r.settled() {
		if time.Now().After(deadline) {
			t.Fatalf("replica %s not settled after %v", r.cfg.Replica, presenceSettle+10*time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitAbsent waits until db says replica is not present.
func waitAbsent(t *testing.T, db *postgres.Store, replica string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		present, err := db.ReplicaPresent(t.Context(), replica)
		if err != nil {
			t.Fatal(err)
		}
		if !present {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s still present 10s after its presence ended", replica)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
