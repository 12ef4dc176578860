package reconcile

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// TestObjectGC: objects written before the row that would record them was
// committed (a crash between Put and commit) are deleted; what a row
// records, and shared objects while an upload may be under way, stay.
func TestObjectGC(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, true)
	sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
	kept := h.snapshot(sb, func(s *store.Snapshot) { s.Node, s.Tier = "", "hibernate" })
	keptObjs := h.uploaded(kept, "disk")
	base := h.putObject(sharedPrefix(h.tenant)+"k1/bases/b1", "base recorded")
	h.setArtifacts(kept.ID, append(keptObjs, base))
	// A snapshot whose row is gone (the parts were stored, the row never
	// committed or deleted meanwhile), and a shared base only it used.
	gone := store.Snapshot{ID: "sn-gone", Tenant: h.tenant}
	goneObjs := h.uploaded(gone, "disk", "memory")
	orphanBase := h.putObject(sharedPrefix(h.tenant)+"k1/bases/b2", "base of nobody")
	foreign := h.putObject("elsewhere/not-ours", "not under tenants/")

	// An upload may be under way (a hibernate row without artifacts): the
	// shared orphan stays, the row-less snapshot's objects go.
	pending := h.snapshot(sb, func(s *store.Snapshot) { s.Tier, s.State = "hibernate", store.SnapshotCreating })
	if _, err := h.r.collectAllObjects(h.ctx); err != nil {
		t.Fatalf("object gc: %v", err)
	}
	for _, o := range goneObjs {
		h.wantObject(o.Key, false)
	}
	h.wantObject(orphanBase.Key, true)

	// The upload is over: the shared orphan goes too.
	if err := h.st.DeleteSnapshot(h.ctx, pending.ID); err != nil {
		t.Fatal(err)
	}
	n, err := h.r.collectObjects(h.ctx, h.tenant)
	if err != nil || n != 1 {
		t.Fatalf("object gc: deleted %d, %v; want the one shared orphan", n, err)
	}
	h.wantObject(orphanBase.Key, false)
	for _, o := range append(keptObjs, base, foreign) {
		h.wantObject(o.Key, true)
	}

	// Deleting the last snapshot that records the base frees it at once.
	if err := h.r.dropSnapshot(h.ctx, h.getSnapshot(kept.ID)); err != nil {
		t.Fatalf("drop snapshot: %v", err)
	}
	h.wantObject(base.Key, false)
	h.wantObject(foreign.Key, true)
}

// deleteHook is a store that runs before ahead of every Delete.
type deleteHook struct {
	objstore.Store
	before func(key string)
}

func (d deleteHook) Delete(ctx context.Context, key string) error {
	d.before(key)
	return d.Store.Delete(ctx, key)
}

// TestObjectGCLooksAgainBeforeEachSharedDelete: a hibernation that begins
// while the GC deletes (its sandbox now hibernating: its upload may reuse
// a shared object it found) stops the GC from deleting the tenant's
// remaining shared objects.
func TestObjectGCLooksAgainBeforeEachSharedDelete(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, true)
	sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
	first := h.putObject(sharedPrefix(h.tenant)+"k1/bases/b1", "unrecorded base 1")
	second := h.putObject(sharedPrefix(h.tenant)+"k1/bases/b2", "unrecorded base 2")
	deletes := 0
	h.r.cfg.Objects = deleteHook{Store: h.objs, before: func(string) {
		if deletes++; deletes == 1 {
			cur, err := h.st.GetSandboxByID(h.ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			cur.State = sandbox.StateHibernating
			if err := h.st.UpdateSandbox(h.ctx, cur); err != nil {
				t.Fatal(err)
			}
		}
	}}
	n, err := h.r.collectObjects(h.ctx, h.tenant)
	if err != nil || n != 1 {
		t.Fatalf("object gc: deleted %d, %v; want the first shared object only", n, err)
	}
	h.wantObject(first.Key, false)
	h.wantObject(second.Key, true)
}

// TestRunSweepsObjectsAtStart: a control plane that starts (after a crash
// between an object's Put and its row's commit) deletes the orphan without
// waiting for a snapshot's delete.
func TestRunSweepsObjectsAtStart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Workers: 1, Resync: time.Hour}, true)
	orphan := h.uploaded(store.Snapshot{ID: "sn-crashed", Tenant: h.tenant}, "disk")[0]
	stop := runReconciler(t, h)
	defer stop()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := h.objs.Stat(h.ctx, orphan.Key); errdefs.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan %s still stored 30 s after Run started", orphan.Key)
		}
	}
}

// hungLister is a store whose List answers only when ctx ends.
type hungLister struct{ objstore.Store }

func (hungLister) List(ctx context.Context, _ string) ([]objstore.Info, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestObjectSweepDoesNotHoldUpResync: a hung object store does not stop
// Run from driving sandboxes.
func TestObjectSweepDoesNotHoldUpResync(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Workers: 1, Resync: 10 * time.Millisecond}, true)
	h.r.cfg.Objects = hungLister{Store: h.objs}
	stop := runReconciler(t, h)
	defer stop()
	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	for deadline := time.Now().Add(30 * time.Second); h.get(sb.ID).State != sandbox.StateRunning; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sandbox still %s: the resync is held up", h.get(sb.ID).State)
		}
	}
}

// runReconciler runs h's reconciler until the returned stop is called.
func runReconciler(t *testing.T, h *harness) (stop func()) {
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- h.r.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// TestObjectGCAndAHibernationTakeTurns: a hibernation that begins after
// the GC's last look at a tenant and before its delete of a shared object
// nobody records (the narrow race of F-2) must not reuse that object: its
// upload waits until the GC is done, then finds the object gone and
// uploads it again, so the hibernated snapshot's every recorded object is
// stored.
func TestObjectGCAndAHibernationTakeTurns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{UploadRetry: time.Minute}, true)
	base := h.putObject(sharedPrefix(h.tenant)+"base-1", "shared base")
	var sb *sandbox.Sandbox
	uploads := 0
	h.nodes["n1"].upload = func(id string, req nodev1.UploadSnapshot) (*nodev1.Artifacts, error) {
		uploads++
		// A node's upload reuses a shared object it finds (Stat), as
		// the real one does for bases.
		shared := base
		if _, err := h.objs.Stat(h.ctx, base.Key); err != nil {
			shared = h.putObject(base.Key, "shared base")
		}
		objs := []nodev1.Object{h.putObject(req.Prefix+"disk.enc", "disk of "+id), shared}
		return &nodev1.Artifacts{Export: json.RawMessage(`{"v":1}`), Objects: objs, PlainBytes: 200, StoredBytes: 100}, nil
	}
	var during error
	h.r.cfg.Objects = deleteHook{Store: h.objs, before: func(key string) {
		if key != base.Key || sb != nil {
			return
		}
		// Between the GC's last look and its delete: a hibernation of
		// the tenant runs as far as it can.
		sb = h.newSandbox(sandbox.StateHibernating, "ns", nil)
		_, during = h.pass(sb.ID)
	}}
	if _, err := h.r.collectObjects(h.ctx, h.tenant); err != nil {
		t.Fatalf("object gc: %v", err)
	}
	if sb == nil {
		t.Fatal("the GC deleted no shared object: the race was not run")
	}
	t.Logf("the hibernation's pass while the GC deletes: %v", during)
	if during != nil && !errdefs.IsUnavailable(during) {
		t.Errorf("hibernation while the GC deletes: %v, want a wait (unavailable)", during)
	}
	h.r.cfg.Objects = h.objs
	for i := 0; h.get(sb.ID).State == sandbox.StateHibernating && i < 5; i++ {
		_, _ = h.pass(sb.ID)
	}
	h.wantState(sb.ID, sandbox.StateHibernated, sandbox.StateHibernated)
	snaps, err := h.st.ListSnapshots(h.ctx, store.SnapshotFilter{Tenant: h.tenant})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		var arts nodev1.Artifacts
		if s.Artifacts == "" || json.Unmarshal([]byte(s.Artifacts), &arts) != nil {
			continue
		}
		for _, obj := range arts.Objects {
			if _, err := h.objs.Stat(h.ctx, obj.Key); err != nil {
				t.Errorf("snapshot %s of the hibernated sandbox records %s, which is not stored (%v): its restore would be refused", s.ID, obj.Key, err)
			}
		}
	}
	t.Logf("%d uploads", uploads)
}
