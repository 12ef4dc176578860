package storetest

import (
	"errors"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

func testTenantQuota(t *testing.T, s store.Store) {
	tn := newTenant(t, s, "quota", at(1))
	got, err := s.GetTenant(ctx(t), tn.ID)
	must(t, "GetTenant", err)
	if !got.Quota.Unlimited() {
		t.Fatalf("new tenant's quota = %+v, want unlimited", got.Quota)
	}
	q := store.Quota{MaxSandboxes: 3, MaxMemoryMiB: 4096, MaxCPUs: 8}
	must(t, "SetTenantQuota", s.SetTenantQuota(ctx(t), tn.ID, q))
	got, err = s.GetTenant(ctx(t), tn.ID)
	must(t, "GetTenant", err)
	if got.Quota != q {
		t.Errorf("GetTenant quota = %+v, want %+v", got.Quota, q)
	}
	list, err := s.ListTenants(ctx(t))
	must(t, "ListTenants", err)
	if len(list) != 1 || list[0].Quota != q {
		t.Errorf("ListTenants = %+v, want one with quota %+v", list, q)
	}
	withQuota := store.Tenant{ID: sandbox.NewTenantID(), Name: "born limited", CreatedAt: at(2), Quota: store.Quota{MaxCPUs: 2}}
	must(t, "CreateTenant with quota", s.CreateTenant(ctx(t), withQuota))
	if got, err := s.GetTenant(ctx(t), withQuota.ID); err != nil || got.Quota != withQuota.Quota {
		t.Errorf("GetTenant = %+v, %v; want quota %+v", got, err, withQuota.Quota)
	}
	must(t, "SetTenantQuota unlimited", s.SetTenantQuota(ctx(t), tn.ID, store.Quota{}))
	if got, _ := s.GetTenant(ctx(t), tn.ID); !got.Quota.Unlimited() {
		t.Errorf("quota after reset = %+v, want unlimited", got.Quota)
	}
	wantClass(t, "SetTenantQuota unknown tenant", s.SetTenantQuota(ctx(t), "t-doesnotexist0000", q), errdefs.ErrNotFound)
	wantClass(t, "SetTenantQuota negative", s.SetTenantQuota(ctx(t), tn.ID, store.Quota{MaxCPUs: -1}), errdefs.ErrInvalidArgument)
	wantClass(t, "CreateTenant negative quota", s.CreateTenant(ctx(t), store.Tenant{ID: sandbox.NewTenantID(), Name: "x", Quota: store.Quota{MaxSandboxes: -2}}), errdefs.ErrInvalidArgument)
	_, err = s.TenantUsage(ctx(t), "t-doesnotexist0000")
	wantClass(t, "TenantUsage unknown tenant", err, errdefs.ErrNotFound)
}

func testTenantUsage(t *testing.T, s store.Store) {
	tn := newTenant(t, s, "usage", at(1))
	other := newTenant(t, s, "other", at(2))
	newSandbox(t, s, other.ID, at(3)) // another tenant's: never counted
	u, err := s.TenantUsage(ctx(t), tn.ID)
	must(t, "TenantUsage", err)
	if u != (store.Usage{}) {
		t.Fatalf("usage of a tenant without sandboxes = %+v, want zero", u)
	}
	// One sandbox per state: only those holding resources count.
	want := store.Usage{}
	for i, st := range sandbox.States {
		sb := newSandbox(t, s, tn.ID, at(4+i))
		sb.State = st
		must(t, "UpdateSandbox to "+string(st), s.UpdateSandbox(ctx(t), sb))
		if store.HoldsResources(st) {
			want.Sandboxes++
			want.MemoryMiB += sb.MemoryMiB
			want.CPUs += sb.CPUs
		}
	}
	u, err = s.TenantUsage(ctx(t), tn.ID)
	must(t, "TenantUsage", err)
	if u != want {
		t.Errorf("TenantUsage = %+v, want %+v", u, want)
	}
	for _, st := range []sandbox.State{sandbox.StateHibernated, sandbox.StateStopped, sandbox.StateFailed, sandbox.StateDeleted} {
		if store.HoldsResources(st) {
			t.Errorf("HoldsResources(%s) = true", st)
		}
	}
	if !store.HoldsResources(sandbox.StateDeleting) || !store.HoldsResources(sandbox.StatePaused) {
		t.Error("a deleting or paused sandbox holds no resources")
	}
}

func testNodeUsage(t *testing.T, s store.Store) {
	u, err := s.NodeUsage(ctx(t))
	must(t, "NodeUsage", err)
	if len(u) != 0 {
		t.Fatalf("NodeUsage with no sandboxes = %+v, want none", u)
	}
	a := newTenant(t, s, "nodes-a", at(1))
	b := newTenant(t, s, "nodes-b", at(2))
	newSandbox(t, s, a.ID, at(3)) // placed nowhere yet: no node's
	// One sandbox per state on n1, of either tenant: only those holding
	// resources count; two on n2.
	want := map[string]store.Usage{}
	for i, st := range sandbox.States {
		tn := a
		if i%2 == 1 {
			tn = b
		}
		sb := newSandbox(t, s, tn.ID, at(4+i))
		sb.State, sb.Node = st, "n1"
		sb.CPUs, sb.MemoryMiB = 1+i%3, 128*(i+1)
		must(t, "UpdateSandbox to "+string(st), s.UpdateSandbox(ctx(t), sb))
		if store.HoldsResources(st) {
			w := want["n1"]
			w.Sandboxes++
			w.MemoryMiB += sb.MemoryMiB
			w.CPUs += sb.CPUs
			want["n1"] = w
		}
	}
	for i := range 2 {
		sb := newSandbox(t, s, b.ID, at(40+i))
		sb.State, sb.Node = sandbox.StateRunning, "n2"
		must(t, "UpdateSandbox on n2", s.UpdateSandbox(ctx(t), sb))
		w := want["n2"]
		w.Sandboxes++
		w.MemoryMiB += sb.MemoryMiB
		w.CPUs += sb.CPUs
		want["n2"] = w
	}
	u, err = s.NodeUsage(ctx(t))
	must(t, "NodeUsage", err)
	if len(u) != len(want) || u["n1"] != want["n1"] || u["n2"] != want["n2"] {
		t.Errorf("NodeUsage = %+v, want %+v", u, want)
	}
}

// quotaSandbox is a new sandbox of tenant with mib MiB and cpus CPUs, not
// yet stored.
func quotaSandbox(tenant string, mib, cpus int) *sandbox.Sandbox {
	return sandbox.New(tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: cpus, MemoryMiB: mib, DiskMiB: 512}, at(5))
}

// wantQuotaError fails unless err is a *store.QuotaError on limit.
func wantQuotaError(t *testing.T, what string, err error, limit string) {
	t.Helper()
	var qe *store.QuotaError
	if !errors.As(err, &qe) || !errors.Is(err, errdefs.ErrResourceExhausted) || qe.Limit != limit {
		t.Fatalf("%s: err = %v, want a quota error on %s", what, err, limit)
	}
}

func testCreateWithinQuota(t *testing.T, s store.Store) {
	newTemplate(t, s, "minimal")
	tn := newTenant(t, s, "admit", at(1))
	unlimited := newTenant(t, s, "free", at(2))
	for range 5 {
		must(t, "CreateSandboxWithinQuota unlimited", s.CreateSandboxWithinQuota(ctx(t), quotaSandbox(unlimited.ID, 1024, 4)))
	}
	must(t, "SetTenantQuota", s.SetTenantQuota(ctx(t), tn.ID, store.Quota{MaxSandboxes: 2, MaxMemoryMiB: 1024, MaxCPUs: 3}))
	a := quotaSandbox(tn.ID, 512, 1)
	must(t, "admit first", s.CreateSandboxWithinQuota(ctx(t), a))
	if a.Version != 1 {
		t.Errorf("admitted sandbox version = %d, want 1", a.Version)
	}
	wantQuotaError(t, "memory over", s.CreateSandboxWithinQuota(ctx(t), quotaSandbox(tn.ID, 768, 1)), "memory")
	wantQuotaError(t, "cpus over", s.CreateSandboxWithinQuota(ctx(t), quotaSandbox(tn.ID, 256, 3)), "cpus")
	b := quotaSandbox(tn.ID, 512, 2)
	must(t, "admit second (exactly at every limit)", s.CreateSandboxWithinQuota(ctx(t), b))
	c := quotaSandbox(tn.ID, 1, 0)
	err := s.CreateSandboxWithinQuota(ctx(t), c)
	wantQuotaError(t, "third", err, "sandboxes")
	if _, gerr := s.GetSandboxByID(ctx(t), c.ID); !errors.Is(gerr, errdefs.ErrNotFound) {
		t.Errorf("refused sandbox was stored: %v", gerr)
	}
	var qe *store.QuotaError
	errors.As(err, &qe)
	if qe.Usage != (store.Usage{Sandboxes: 2, MemoryMiB: 1024, CPUs: 3}) || qe.Tenant != tn.ID {
		t.Errorf("quota error = %+v, want usage 2/1024/3 of %s", qe, tn.ID)
	}
	// CreateSandbox itself never checks: the reconciler's own writes pass.
	must(t, "CreateSandbox over quota", s.CreateSandbox(ctx(t), quotaSandbox(tn.ID, 1, 1)))

	// A sandbox that releases its resources frees its slot.
	a.State = sandbox.StateHibernated
	must(t, "hibernate a", s.UpdateSandbox(ctx(t), a))
	b.State = sandbox.StateStopped
	must(t, "stop b", s.UpdateSandbox(ctx(t), b))
	must(t, "admit after release", s.CreateSandboxWithinQuota(ctx(t), quotaSandbox(tn.ID, 512, 1)))
	// Lowering the quota refuses what would start, stops nothing.
	must(t, "SetTenantQuota lower", s.SetTenantQuota(ctx(t), tn.ID, store.Quota{MaxSandboxes: 1}))
	wantQuotaError(t, "after lowering", s.CreateSandboxWithinQuota(ctx(t), quotaSandbox(tn.ID, 1, 1)), "sandboxes")
	// A sandbox created in a state that holds nothing is not counted.
	idle := quotaSandbox(tn.ID, 1, 1)
	idle.State = sandbox.StateStopped
	must(t, "create stopped", s.CreateSandboxWithinQuota(ctx(t), idle))
	wantClass(t, "unknown tenant", s.CreateSandboxWithinQuota(ctx(t), quotaSandbox("t-doesnotexist0000", 1, 1)), errdefs.ErrNotFound)
}

func testUpdateWithinQuota(t *testing.T, s store.Store) {
	tn := newTenant(t, s, "restart", at(1))
	a, b := quotaSandbox(tn.ID, 256, 1), quotaSandbox(tn.ID, 256, 1)
	must(t, "create a", s.CreateSandbox(ctx(t), a))
	must(t, "create b", s.CreateSandbox(ctx(t), b))
	b.State = sandbox.StateHibernated
	must(t, "hibernate b", s.UpdateSandbox(ctx(t), b))
	must(t, "SetTenantQuota", s.SetTenantQuota(ctx(t), tn.ID, store.Quota{MaxSandboxes: 1}))

	// An update that keeps holding is never refused, even over quota.
	a.Reason = "still running"
	must(t, "update running a", s.UpdateSandboxWithinQuota(ctx(t), a))
	// Restoring b would take a second slot.
	b.State = sandbox.StateRestoring
	wantQuotaError(t, "restore b", s.UpdateSandboxWithinQuota(ctx(t), b), "sandboxes")
	got, err := s.GetSandboxByID(ctx(t), b.ID)
	must(t, "GetSandboxByID", err)
	if got.State != sandbox.StateHibernated || got.Version != b.Version {
		t.Errorf("refused restore wrote b: %s v%d", got.State, got.Version)
	}
	// A stale b is a conflict, as with UpdateSandbox.
	stale := *b
	stale.Version--
	wantClass(t, "stale update", s.UpdateSandboxWithinQuota(ctx(t), &stale), errdefs.ErrConflict)
	// Stopping a frees the slot.
	a.State = sandbox.StateStopped
	must(t, "stop a", s.UpdateSandboxWithinQuota(ctx(t), a))
	must(t, "restore b after a stopped", s.UpdateSandboxWithinQuota(ctx(t), b))
	a.State = sandbox.StateRestoring
	wantQuotaError(t, "start a", s.UpdateSandboxWithinQuota(ctx(t), a), "sandboxes")
}

// testConcurrentAdmissions races many creates for a tenant's last slots:
// exactly as many as the quota allows are admitted, whichever connection or
// replica (several stores on one database) runs them.
func testConcurrentAdmissions(t *testing.T, s store.Store) {
	const limit, racers = 3, 12
	newTemplate(t, s, "minimal")
	tn := newTenant(t, s, "race", at(1))
	must(t, "SetTenantQuota", s.SetTenantQuota(ctx(t), tn.ID, store.Quota{MaxSandboxes: limit}))
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.CreateSandboxWithinQuota(ctx(t), quotaSandbox(tn.ID, 128, 1))
		}()
	}
	wg.Wait()
	admitted := 0
	for _, err := range errs {
		var qe *store.QuotaError
		switch {
		case err == nil:
			admitted++
		case errors.As(err, &qe):
		default:
			t.Errorf("create: %v (want success or a quota error)", err)
		}
	}
	u, err := s.TenantUsage(ctx(t), tn.ID)
	must(t, "TenantUsage", err)
	if admitted != limit || u.Sandboxes != limit {
		t.Errorf("%d racing creates: %d admitted, usage %d; want exactly %d", racers, admitted, u.Sandboxes, limit)
	}
}
