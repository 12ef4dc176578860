package reconcile

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/postgres"
	"github.com/spacesandbox/space/internal/store/postgres/pgtest"
)

// longResync is the resync period of the replicas below: far longer than
// any of the tests waits, so that only announcements can explain a replica
// noticing a change in time.
const longResync = time.Minute

// pgReplicaStore is one replica's own PostgreSQL store (its own pool and its
// own listener). It counts the passes run over it (lease acquisitions) and
// its listings of every sandbox; unlisted makes those listings come back
// empty: a replica whose resync has not come round yet.
type pgReplicaStore struct {
	*postgres.Store
	unlisted bool
	passes   atomic.Int64
	listings atomic.Int64
}

func openReplicaStore(t testing.TB, url string, unlisted bool) *pgReplicaStore {
	t.Helper()
	st, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("open postgres store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return &pgReplicaStore{Store: st, unlisted: unlisted}
}

func (s *pgReplicaStore) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*sandbox.Sandbox, error) {
	// Counted once the listing has read the table: a test that waits for
	// n listings and then writes knows none of them saw the write.
	defer s.listings.Add(1)
	if s.unlisted {
		return nil, nil
	}
	return s.Store.ListSandboxes(ctx, f)
}

func (s *pgReplicaStore) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	s.passes.Add(1)
	return s.Store.AcquireLease(ctx, name, holder, ttl)
}

// startFollower runs a replica over st, resyncing every resync (0: the
// default): its reconciler and, when follow is set, FollowChanges; both stop
// when the test ends.
func startFollower(t testing.TB, st store.Store, name string, node func(string) (NodeAPI, error), follow bool, resync time.Duration) *Reconciler {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	if tt, ok := t.(*testing.T); ok {
		log = slog.New(slog.NewTextHandler(tt.Output(), nil))
	}
	r := New(Config{Resync: resync, Replica: name + "-" + sandbox.NewActivationID()}, st, node, log.With("replica", name))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(ctx) })
	if follow {
		wg.Go(func() {
			if err := r.FollowChanges(ctx); err != nil {
				t.Errorf("replica %s: FollowChanges: %v", name, err)
			}
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r
}

// listenerPIDs returns the server processes of the connections listening
// for sandbox changes on the database of url, once there are n.
func listenerPIDs(t testing.TB, url string, n int) []int32 {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	deadline := time.Now().Add(20 * time.Second)
	for {
		rows, _ := c.Query(ctx, `SELECT pid FROM pg_stat_activity
            WHERE datname = current_database() AND application_name LIKE '%/changes' ORDER BY pid`)
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) == n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections listen for sandbox changes after 20s, want %d", len(pids), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFor waits on w until sandbox id, read from st after each signal, is
// in state want; it fails the test after limit, saying why.
func waitFor(t testing.TB, st store.Store, w *Watch, id string, want sandbox.State, limit time.Duration, why string) {
	t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case <-w.C:
		case <-deadline:
			state := sandbox.State("unreadable")
			if sb, err := st.GetSandboxByID(context.Background(), id); err == nil {
				state = sb.State
			}
			t.Fatalf("sandbox %s not seen %s within %v (it is %s): %s", id, want, limit, state, why)
		}
		sb, err := st.GetSandboxByID(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == want {
			return
		}
	}
}

// TestAWaiterIsWokenByAChangeOnAnotherReplica: replica b drives a sandbox
// while a request on replica a waits for it to run. Replica a never passes
// over the sandbox (its resync, every minute, has not come round): only b's
// announced writes can wake its waiter, well before a's resync could.
func TestAWaiterIsWokenByAChangeOnAnotherReplica(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	stA, stB := openReplicaStore(t, url, true), openReplicaStore(t, url, false)
	h := newHarnessOn(t, Config{}, false, stB.Store)
	a := startFollower(t, stA, "a", h.node, true, longResync)
	b := startFollower(t, stB, "b", h.node, true, longResync)
	listenerPIDs(t, url, 2)

	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	w := a.Watch(sb.ID)
	defer w.Stop()
	began := time.Now()
	b.Enqueue(sb.ID)
	waitFor(t, stA, w, sb.ID, sandbox.StateRunning, longResync/3,
		"replica b's writes did not wake the waiter on replica a")
	t.Logf("the waiter on replica a saw the sandbox running %v after replica b was asked to start it", time.Since(began).Round(time.Millisecond))
	if n := stA.passes.Load(); n != 0 {
		t.Errorf("replica a ran %d passes; announcements should only wake its waiter", n)
	}
	if got := h.nodes["n1"].callsTo("Start"); len(got) != 1 {
		t.Errorf("node received %d starts, want 1", len(got))
	}
	// Settled, the sandbox announces nothing more: no pass feeds on its
	// own announcements.
	v := h.get(sb.ID).Version
	time.Sleep(500 * time.Millisecond)
	if again := h.get(sb.ID).Version; again != v {
		t.Errorf("the running sandbox was written again (version %d, then %d) with nothing to do", v, again)
	}
}

// TestMissedAnnouncementsAreMadeUp cuts replica a's listening connection:
// what was announced meanwhile may be lost, so when it listens again replica
// a looks at every sandbox. The sandbox here was written before the cut and
// queued nowhere; the resync is a minute away: only that catch-up starts it.
func TestMissedAnnouncementsAreMadeUp(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	stA := openReplicaStore(t, url, false)
	h := newHarnessOn(t, Config{}, false, stA.Store)
	a := startFollower(t, stA, "a", h.node, true, longResync)
	pid := listenerPIDs(t, url, 1)[0]
	// Run's first resync and the catch-up after the first listen.
	for deadline := time.Now().Add(20 * time.Second); stA.listings.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("replica a listed the sandboxes %d times in 20s, want 2 (resync, catch-up)", stA.listings.Load())
		}
	}

	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	w := a.Watch(sb.ID)
	defer w.Stop()
	c, err := pgx.Connect(h.ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(h.ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	waitFor(t, stA, w, sb.ID, sandbox.StateRunning, longResync/3,
		"after its listening connection was cut, replica a did not look at every sandbox again")
	if got := stA.listings.Load(); got < 3 {
		t.Errorf("replica a listed the sandboxes %d times, want a third listing after the cut", got)
	}
}

// TestSQLiteFollowsNoChanges: a store that announces nothing (SQLite, one
// replica) makes FollowChanges return at once.
func TestSQLiteFollowsNoChanges(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	done := make(chan error, 1)
	go func() { done <- h.r.FollowChanges(h.ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("FollowChanges = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("FollowChanges over SQLite did not return")
	}
}

func TestQueueAddIfProcessing(t *testing.T) {
	q := newQueue()
	if q.addIfProcessing("x") {
		t.Fatal("addIfProcessing of a key nobody processes = true")
	}
	q.add("x")
	if key, _ := q.get(); key != "x" {
		t.Fatalf("get = %q, want x", key)
	}
	if !q.addIfProcessing("x") {
		t.Fatal("addIfProcessing of the key being processed = false")
	}
	if q.addIfProcessing("y") {
		t.Fatal("addIfProcessing of another key = true")
	}
	q.done("x")
	if key, _ := q.get(); key != "x" {
		t.Fatalf("after done, get = %q, want x again", key)
	}
	q.done("x")
	q.add("z")
	if key, _ := q.get(); key != "z" {
		t.Fatalf("get = %q, want z: y must not have been queued", key)
	}
}

// BenchmarkCrossReplicaWake measures how long a request waiting on replica
// a takes to see a pause that replica b drives, with a fake node: without
// announcements ("poll", the default 2s resync) replica a sees it at its
// next pass over the sandbox, with them ("notify") when b writes. Each
// pause starts at a random moment of the resync period. It reports the
// median and worst latency, and the passes both replicas ran per pause
// (each acquires and releases the sandbox's lease); "notify-resync-1m" runs
// no resync meanwhile, so its passes are only those the pause caused.
//
//	go test ./internal/reconcile -run '^$' -bench CrossReplicaWake -benchtime 20x
func BenchmarkCrossReplicaWake(b *testing.B) {
	b.Run("poll", func(b *testing.B) { benchmarkCrossReplicaWake(b, false, 0) })
	b.Run("notify", func(b *testing.B) { benchmarkCrossReplicaWake(b, true, 0) })
	b.Run("notify-resync-1m", func(b *testing.B) { benchmarkCrossReplicaWake(b, true, longResync) })
}

func benchmarkCrossReplicaWake(b *testing.B, follow bool, resync time.Duration) {
	url := pgtest.Database(b)
	stA, stB := openReplicaStore(b, url, false), openReplicaStore(b, url, false)
	h := newHarnessOn(b, Config{}, false, stB.Store)
	ra := startFollower(b, stA, "a", h.node, follow, resync)
	rb := startFollower(b, stB, "b", h.node, follow, resync)
	if follow {
		listenerPIDs(b, url, 2)
	}
	var lat []time.Duration
	var passes int64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
		// Out of step with the resync: a pause comes when it comes.
		time.Sleep(50*time.Millisecond + rand.N(2*time.Second))
		before := stA.passes.Load() + stB.passes.Load()
		w := ra.Watch(sb.ID)
		b.StartTimer()
		began := time.Now()
		// What b's API or idle handling does: record the op, queue it.
		cur := h.get(sb.ID)
		if err := cur.Apply(sandbox.OpPause); err != nil {
			b.Fatal(err)
		}
		if err := stB.UpdateSandbox(h.ctx, cur); err != nil {
			b.Fatal(err)
		}
		rb.Enqueue(sb.ID)
		waitFor(b, stA, w, sb.ID, sandbox.StatePaused, 30*time.Second, "the pause was never seen")
		lat = append(lat, time.Since(began))
		b.StopTimer()
		w.Stop()
		time.Sleep(100 * time.Millisecond) // passes the pause caused end
		passes += stA.passes.Load() + stB.passes.Load() - before
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "ms-max")
	b.ReportMetric(float64(passes)/float64(b.N), "passes/op")
	b.Logf("latencies %v", lat)
}

// BenchmarkChangeDuringAnotherReplicasPass measures how long a delete
// requested on replica a waits while replica b is in a pass over the
// sandbox (its node's start hangs, then fails as unavailable: the pass ends
// without writing, so without noticing the delete). Replica a found the
// lease held and tries again a second later; b looks again a second after
// its failed pass, or, with announcements ("notify"), at once. The time is
// from the end of b's pass to the sandbox's deletion; no resync runs.
//
//	go test ./internal/reconcile -run '^$' -bench ChangeDuringAnother -benchtime 20x
func BenchmarkChangeDuringAnotherReplicasPass(b *testing.B) {
	b.Run("poll", func(b *testing.B) { benchmarkChangeDuringPass(b, false) })
	b.Run("notify", func(b *testing.B) { benchmarkChangeDuringPass(b, true) })
}

func benchmarkChangeDuringPass(b *testing.B, follow bool) {
	url := pgtest.Database(b)
	stA, stB := openReplicaStore(b, url, false), openReplicaStore(b, url, false)
	h := newHarnessOn(b, Config{}, false, stB.Store)
	ra := startFollower(b, stA, "a", h.node, follow, longResync)
	rb := startFollower(b, stB, "b", h.node, follow, longResync)
	if follow {
		listenerPIDs(b, url, 2)
	}
	var armed atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	h.nodes["n1"].onCall("Start", func() {
		if armed.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-release
		}
	})
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
		armed.Store(true)
		h.nodes["n1"].failNext("Start", 1, errdefs.ErrUnavailable)
		rb.Enqueue(sb.ID)
		<-entered // b's pass holds the lease, waiting for the node
		cur := h.get(sb.ID)
		if err := cur.Apply(sandbox.OpDelete); err != nil {
			b.Fatal(err)
		}
		if err := stA.UpdateSandbox(h.ctx, cur); err != nil {
			b.Fatal(err)
		}
		ra.Enqueue(sb.ID)
		time.Sleep(50*time.Millisecond + rand.N(time.Second)) // a finds the lease held
		b.StartTimer()
		began := time.Now()
		release <- struct{}{}
		for {
			_, err := stA.GetSandboxByID(h.ctx, sb.ID)
			if errdefs.IsNotFound(err) {
				break
			}
			if time.Since(began) > 30*time.Second {
				b.Fatalf("sandbox %s not deleted 30s after the pass ended (%v)", sb.ID, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		lat = append(lat, time.Since(began))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "ms-max")
	b.Logf("latencies %v", lat)
}
