package reconcile

import (
	"context"
	"testing"
	"time"

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
