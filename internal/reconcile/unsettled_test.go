package reconcile

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/retention"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// countingStore counts the snapshot listings a reconciler makes; duringListing,
// when set, runs inside ListUnsettledSnapshots after the store was read (a
// write racing the resync's listing).
type countingStore struct {
	store.Store
	mu            sync.Mutex
	lists         int // ListSnapshots
	unsettled     int // ListUnsettledSnapshots
	nodes         int // GetNode
	duringListing func()
}

func (s *countingStore) GetNode(ctx context.Context, id string) (store.Node, error) {
	s.mu.Lock()
	s.nodes++
	s.mu.Unlock()
	return s.Store.GetNode(ctx, id)
}

func (s *countingStore) ListSnapshots(ctx context.Context, f store.SnapshotFilter) ([]store.Snapshot, error) {
	s.mu.Lock()
	s.lists++
	s.mu.Unlock()
	return s.Store.ListSnapshots(ctx, f)
}

func (s *countingStore) ListUnsettledSnapshots(ctx context.Context) ([]store.Snapshot, error) {
	s.mu.Lock()
	s.unsettled++
	during := s.duringListing
	s.duringListing = nil
	s.mu.Unlock()
	list, err := s.Store.ListUnsettledSnapshots(ctx)
	if during != nil {
		during()
	}
	return list, err
}

func (s *countingStore) counts() (lists, unsettled, nodes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists, s.unsettled, s.nodes
}

// queued drains the reconciler's queue, returning the ids in it (sorted).
func queued(r *Reconciler) []string {
	r.q.mu.Lock()
	defer r.q.mu.Unlock()
	ids := slices.Clone(r.q.order)
	r.q.order = nil
	clear(r.q.dirty)
	slices.Sort(ids)
	return ids
}

// runQueued runs the passes the queue holds now, once each, as the workers
// would (process), and returns their ids. What they requeue stays queued.
func runQueued(h *harness) []string {
	h.t.Helper()
	h.r.q.mu.Lock()
	n := len(h.r.q.order)
	h.r.q.mu.Unlock()
	var ids []string
	for range n {
		id, _ := h.r.q.get()
		h.r.process(h.ctx, id)
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// TestResyncOfIdleSandboxesListsSnapshotsOnce: a resync over idle sandboxes
// reads their snapshots in one query, not two per sandbox, and does not
// queue the stopped and hibernated ones that nothing is asked of; a pass
// run on news (Enqueue) still lists its own.
func TestResyncOfIdleSandboxesListsSnapshotsOnce(t *testing.T) {
	t.Parallel()
	cs := &countingStore{Store: openStore(t)}
	h := newHarnessOn(t, Config{SingleReplica: true}, false, cs)
	h.putNode("n1", time.Now())
	var running, execs = []string{}, []nodev1.Execution{}
	for range 5 {
		sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
		running = append(running, sb.ID)
		execs = append(execs, exec(sb, nodev1.ExecRunning))
	}
	h.observe("n1", execs...)
	stopped := h.newSandbox(sandbox.StateStopped, "ns", func(sb *sandbox.Sandbox) { sb.Node, sb.ExecID = "", "" })
	hib := h.newSandbox(sandbox.StateHibernated, "ns", func(sb *sandbox.Sandbox) { sb.Node, sb.ExecID = "", "" })
	owing := h.newSandbox(sandbox.StateHibernated, "ns", func(sb *sandbox.Sandbox) { sb.Node, sb.ExecID = "", "" })
	h.snapshot(owing, func(s *store.Snapshot) { s.State = store.SnapshotCreating })

	h.r.resync(h.ctx)
	want := slices.Sorted(slices.Values(append(slices.Clone(running), owing.ID)))
	if got := runQueued(h); !slices.Equal(got, want) {
		t.Errorf("resync queued %v, want the running and the owing sandboxes %v (not %s, %s)", got, want, stopped.ID, hib.ID)
	}
	lists, unsettled, nodes := cs.counts()
	// The owing sandbox's pass lists its deleting and creating snapshots;
	// the running ones' list nothing, nor read their node.
	if lists != 2 || unsettled != 1 || nodes != 0 {
		t.Errorf("resync and its passes: %d ListSnapshots, %d ListUnsettledSnapshots, %d GetNode; want 2 (the owing sandbox's pass), 1, 0",
			lists, unsettled, nodes)
	}
	if got := h.getSnapshot(h.snapshots(owing.ID)[0].ID); got.State != store.SnapshotFailed {
		t.Errorf("the hibernated sandbox's snapshot request is %s, want failed", got.State)
	}

	// A request after the resync: the handler writes its row, then
	// Enqueue; the pass lists and takes it although the resync found none.
	h.r.resync(h.ctx)
	req := h.snapshot(h.get(running[0]), func(s *store.Snapshot) { s.State = store.SnapshotCreating })
	h.r.Enqueue(running[0])
	runQueued(h)
	if got := h.getSnapshot(req.ID); got.State != store.SnapshotReady {
		t.Errorf("snapshot requested after the resync is %s (%s), want ready: the pass used the resync's hint", got.State, got.Reason)
	}

	// A stopped sandbox past its timeout, or moved by a drain, is queued.
	expired := h.newSandbox(sandbox.StateStopped, "ns", func(sb *sandbox.Sandbox) {
		sb.Node, sb.ExecID, sb.ExpiresAt = "", "", time.Now().Add(-time.Minute)
	})
	moved := h.newSandbox(sandbox.StateHibernated, "ns", func(sb *sandbox.Sandbox) {
		sb.Node, sb.ExecID, sb.Desired = "", "", sandbox.StateRunning
	})
	h.r.resync(h.ctx)
	want = slices.Sorted(slices.Values(append(slices.Clone(running), expired.ID, moved.ID)))
	if got := queued(h.r); !slices.Equal(got, want) {
		t.Errorf("resync queued %v, want the running, the expired and the moved sandboxes %v", got, want)
	}
}

// TestResyncHintIgnoresWritesDuringTheListing: a snapshot row written while
// the resync lists (after its read) by a handler (then Enqueue) or by a pass
// over the sandbox (a scheduled snapshot) is taken by the sandbox's next
// pass, not left to the resync after.
func TestResyncHintIgnoresWritesDuringTheListing(t *testing.T) {
	t.Parallel()
	cs := &countingStore{Store: openStore(t)}
	cfg := Config{SingleReplica: true, Schedule: retention.Schedule{DiskEvery: time.Hour}}
	h := newHarnessOn(t, cfg, false, cs)
	old := func(sb *sandbox.Sandbox) { sb.CreatedAt = time.Now().Add(-30 * time.Minute) }
	byHandler := h.newSandbox(sandbox.StateRunning, "ns", old)
	byPass := h.newSandbox(sandbox.StateRunning, "ns", func(sb *sandbox.Sandbox) { sb.CreatedAt = time.Now().Add(-2 * time.Hour) })
	h.observe("n1", exec(byHandler, nodev1.ExecRunning), exec(byPass, nodev1.ExecRunning))

	var req store.Snapshot
	cs.duringListing = func() {
		req = h.snapshot(byHandler, func(s *store.Snapshot) { s.State = store.SnapshotCreating })
		h.r.Enqueue(byHandler.ID)
		// A worker's pass over byPass: its schedule is due, so it asks
		// for a snapshot (a creating row) and requeues itself.
		if id := queued(h.r); !slices.Equal(id, []string{byHandler.ID}) {
			t.Errorf("queued during the listing: %v, want [%s]", id, byHandler.ID)
		}
		h.r.q.add(byPass.ID)
		id, _ := h.r.q.get()
		h.r.process(h.ctx, id)
		if n := len(h.snapshots(byPass.ID)); n != 1 {
			t.Errorf("the pass over the due sandbox asked for %d snapshots, want 1", n)
		}
	}
	h.r.resync(h.ctx)
	if got := runQueued(h); !slices.Contains(got, byHandler.ID) || !slices.Contains(got, byPass.ID) {
		t.Fatalf("passes after the resync: %v, want both sandboxes", got)
	}
	if got := h.getSnapshot(req.ID); got.State != store.SnapshotReady {
		t.Errorf("snapshot requested during the listing is %s (%s), want ready after the next pass", got.State, got.Reason)
	}
	if snaps := h.snapshots(byPass.ID); len(snaps) != 1 || snaps[0].State != store.SnapshotReady {
		t.Errorf("scheduled snapshot asked for during the listing: %+v, want one, ready after the next pass", snaps)
	}
}

// TestResyncHintReadsANodeThatChanged: a pass takes only "neither draining
// nor down" from its resync's node listing. A node drained or declared lost
// after the listing (then its sandboxes queued, as the drain handler and
// declareLostNodes do) is seen by the next pass; a node the listing saw
// down that came back is read again, not recovered from.
func TestResyncHintReadsANodeThatChanged(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{SingleReplica: true, NoRecovery: true}, false)
	h.putNode("n1", time.Now())
	drained := h.newSandbox(sandbox.StateRunning, "ns", nil)
	h.observe("n1", exec(drained, nodev1.ExecRunning))
	h.r.resync(h.ctx)
	h.setNodeState("n1", store.NodeDraining)
	h.r.Enqueue(drained.ID)
	runQueued(h)
	if got := h.get(drained.ID); !strings.Contains(got.Reason, "is draining") {
		t.Errorf("pass after the drain: reason %q, want the drain's refusal (no object store)", got.Reason)
	}

	h.setNodeState("n1", store.NodeReady)
	lost := h.newSandbox(sandbox.StateRunning, "ns", nil)
	h.observe("n1", exec(drained, nodev1.ExecRunning), exec(lost, nodev1.ExecRunning))
	h.r.resync(h.ctx)
	h.setNodeState("n1", store.NodeDown)
	h.r.Enqueue(lost.ID)
	runQueued(h)
	h.wantState(lost.ID, sandbox.StateFailed, sandbox.StateFailed)

	// The listing saw n1 down; it is back before the pass.
	back := h.newSandbox(sandbox.StateRunning, "ns", nil)
	h.observe("n1", exec(drained, nodev1.ExecRunning), exec(back, nodev1.ExecRunning))
	h.r.resync(h.ctx)
	h.setNodeState("n1", store.NodeReady)
	runQueued(h)
	h.wantState(back.ID, sandbox.StateRunning, sandbox.StateRunning)
}

// TestResyncHintsLastOneResync: a resync replaces the hints of the one
// before, so a sandbox that is gone (its pass never ran here) leaves none
// behind, and a failed listing leaves no hint at all.
func TestResyncHintsLastOneResync(t *testing.T) {
	t.Parallel()
	h := newSnapshotHints()
	v := &resyncView{}
	h.begin()
	h.end([]string{"a", "b"}, v, true)
	h.begin()
	h.end([]string{"b"}, v, true)
	if len(h.quiet) != 1 || h.quiet["b"] != v {
		t.Errorf("hints after two resyncs: %v, want only b", h.quiet)
	}
	h.begin()
	h.touch("b")
	h.end([]string{"b"}, v, true)
	if h.take("b") != nil {
		t.Error("b was touched during the listing and has a hint")
	}
	h.begin()
	h.end([]string{"b"}, v, false)
	if len(h.quiet) != 0 {
		t.Errorf("hints after a failed listing: %v, want none", h.quiet)
	}
}
