package storetest

import (
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// newSnapshot returns a ready disk snapshot record of sandbox sb of tenant,
// created at created; the caller stores it.
func newSnapshot(id, tenant, sb string, created time.Time) store.Snapshot {
	return store.Snapshot{
		ID: id, SandboxID: sb, Tenant: tenant, Kind: store.SnapshotDisk, Tier: "manual",
		State: store.SnapshotReady, Node: "node-1", Runtime: "ns", Template: "minimal",
		CPUs: 1, MemoryMiB: 128, Generation: 1, CreatedAt: created,
	}
}

func snapshotIDs(list []store.Snapshot) []string {
	var out []string
	for _, sn := range list {
		out = append(out, sn.ID)
	}
	return out
}

// checkSnapshot compares every field but UpdatedAt, which the store sets.
func checkSnapshot(t *testing.T, when string, got, want store.Snapshot) {
	t.Helper()
	if !got.CreatedAt.Equal(want.CreatedAt) || got.UpdatedAt.IsZero() {
		t.Errorf("%s: CreatedAt %v UpdatedAt %v, want %v and set", when, got.CreatedAt, got.UpdatedAt, want.CreatedAt)
	}
	got.CreatedAt, got.UpdatedAt, want.CreatedAt, want.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if got != want {
		t.Errorf("%s: stored snapshot\n got %+v\nwant %+v", when, got, want)
	}
}

func testSnapshots(t *testing.T, s store.Store) {
	a := newTenant(t, s, "a", at(1))
	b := newTenant(t, s, "b", at(1))
	list, err := s.ListSnapshots(ctx(t), store.SnapshotFilter{})
	must(t, "ListSnapshots on empty store", err)
	if list == nil || len(list) != 0 {
		t.Fatalf("ListSnapshots on empty store = %#v, want empty non-nil", list)
	}

	// Created out of order; sn-3 and sn-2 share a time, so id breaks the tie.
	s4 := newSnapshot("sn-4", a.ID, "sb-x", at(9))
	s1 := newSnapshot("sn-1", a.ID, "sb-x", at(1))
	s3 := newSnapshot("sn-3", a.ID, "sb-y", at(5))
	s2 := newSnapshot("sn-2", b.ID, "sb-z", at(5))
	s2.State, s3.State = store.SnapshotCreating, store.SnapshotFailed
	for _, sn := range []store.Snapshot{s4, s1, s3, s2} {
		must(t, "CreateSnapshot "+sn.ID, s.CreateSnapshot(ctx(t), sn))
	}
	wantClass(t, "CreateSnapshot duplicate", s.CreateSnapshot(ctx(t), s1), errdefs.ErrConflict)
	orphan := newSnapshot("sn-orphan", "t-nosuchtenant000", "sb-x", at(1))
	wantClass(t, "CreateSnapshot unknown tenant", s.CreateSnapshot(ctx(t), orphan), errdefs.ErrNotFound)

	for _, tc := range []struct {
		name string
		f    store.SnapshotFilter
		want []string
	}{
		{"all", store.SnapshotFilter{}, []string{"sn-1", "sn-2", "sn-3", "sn-4"}},
		{"sandbox", store.SnapshotFilter{SandboxID: "sb-x"}, []string{"sn-1", "sn-4"}},
		{"tenant a", store.SnapshotFilter{Tenant: a.ID}, []string{"sn-1", "sn-3", "sn-4"}},
		{"tenant b", store.SnapshotFilter{Tenant: b.ID}, []string{"sn-2"}},
		{"ready", store.SnapshotFilter{State: store.SnapshotReady}, []string{"sn-1", "sn-4"}},
		{"creating", store.SnapshotFilter{State: store.SnapshotCreating}, []string{"sn-2"}},
		{"tenant a failed", store.SnapshotFilter{Tenant: a.ID, State: store.SnapshotFailed}, []string{"sn-3"}},
		{"sandbox of another tenant", store.SnapshotFilter{SandboxID: "sb-z", Tenant: a.ID}, nil},
		{"sandbox, tenant and state", store.SnapshotFilter{SandboxID: "sb-x", Tenant: a.ID, State: store.SnapshotReady},
			[]string{"sn-1", "sn-4"}},
		{"unknown sandbox", store.SnapshotFilter{SandboxID: "sb-none"}, nil},
		{"deleting", store.SnapshotFilter{State: store.SnapshotDeleting}, nil},
	} {
		list, err := s.ListSnapshots(ctx(t), tc.f)
		must(t, "ListSnapshots "+tc.name, err)
		if list == nil {
			t.Errorf("ListSnapshots %s = nil, want non-nil", tc.name)
		}
		if got := snapshotIDs(list); !equalStrings(got, tc.want) {
			t.Errorf("ListSnapshots %s = %v, want %v", tc.name, got, tc.want)
		}
	}

	got, err := s.GetSnapshot(ctx(t), "", s3.ID)
	must(t, "GetSnapshot without tenant", err)
	checkSnapshot(t, "GetSnapshot", got, s3)
	_, err = s.GetSnapshot(ctx(t), "", "sn-missing")
	wantClass(t, "GetSnapshot missing", err, errdefs.ErrNotFound)

	must(t, "DeleteSnapshot", s.DeleteSnapshot(ctx(t), s1.ID))
	_, err = s.GetSnapshot(ctx(t), "", s1.ID)
	wantClass(t, "GetSnapshot after delete", err, errdefs.ErrNotFound)
	wantClass(t, "DeleteSnapshot again", s.DeleteSnapshot(ctx(t), s1.ID), errdefs.ErrNotFound)
	wantClass(t, "UpdateSnapshot deleted", s.UpdateSnapshot(ctx(t), s1), errdefs.ErrNotFound)
	list, err = s.ListSnapshots(ctx(t), store.SnapshotFilter{SandboxID: "sb-x"})
	must(t, "ListSnapshots after delete", err)
	if got := snapshotIDs(list); !equalStrings(got, []string{"sn-4"}) {
		t.Errorf("ListSnapshots after delete = %v, want [sn-4]", got)
	}
}

// testUnsettledSnapshots: ListUnsettledSnapshots returns the creating and
// deleting snapshots of every sandbox and tenant, oldest first, and follows
// their state changes.
func testUnsettledSnapshots(t *testing.T, s store.Store) {
	a := newTenant(t, s, "a", at(1))
	b := newTenant(t, s, "b", at(1))
	unsettled := func(when string, want ...string) {
		t.Helper()
		list, err := s.ListUnsettledSnapshots(ctx(t))
		must(t, "ListUnsettledSnapshots "+when, err)
		if list == nil {
			t.Errorf("ListUnsettledSnapshots %s = nil, want non-nil", when)
		}
		if got := snapshotIDs(list); !equalStrings(got, want) {
			t.Errorf("ListUnsettledSnapshots %s = %v, want %v", when, got, want)
		}
	}
	unsettled("on empty store")

	// Every state, across sandboxes and tenants, created out of order; sn-3
	// and sn-2 share a time, so id breaks the tie.
	states := map[string]store.SnapshotState{
		"sn-1": store.SnapshotReady, "sn-2": store.SnapshotCreating, "sn-3": store.SnapshotDeleting,
		"sn-4": store.SnapshotFailed, "sn-5": store.SnapshotCreating, "sn-6": store.SnapshotDeleting,
	}
	snaps := []store.Snapshot{
		newSnapshot("sn-5", a.ID, "sb-x", at(9)),
		newSnapshot("sn-1", a.ID, "sb-x", at(1)),
		newSnapshot("sn-3", a.ID, "sb-y", at(5)),
		newSnapshot("sn-2", b.ID, "sb-z", at(5)),
		newSnapshot("sn-4", b.ID, "sb-z", at(2)),
		newSnapshot("sn-6", b.ID, "sb-w", at(3)),
	}
	byID := map[string]store.Snapshot{}
	for _, sn := range snaps {
		sn.State = states[sn.ID]
		must(t, "CreateSnapshot "+sn.ID, s.CreateSnapshot(ctx(t), sn))
		byID[sn.ID] = sn
	}
	unsettled("after create", "sn-6", "sn-2", "sn-3", "sn-5")
	list, err := s.ListUnsettledSnapshots(ctx(t))
	must(t, "ListUnsettledSnapshots", err)
	for _, got := range list {
		checkSnapshot(t, "ListUnsettledSnapshots "+got.ID, got, byID[got.ID])
	}

	// A taken snapshot leaves the list; a ready one the user deletes joins it.
	sn := byID["sn-2"]
	sn.State = store.SnapshotReady
	must(t, "UpdateSnapshot sn-2 ready", s.UpdateSnapshot(ctx(t), sn))
	sn = byID["sn-1"]
	sn.State = store.SnapshotDeleting
	must(t, "UpdateSnapshot sn-1 deleting", s.UpdateSnapshot(ctx(t), sn))
	sn = byID["sn-5"]
	sn.State = store.SnapshotFailed
	must(t, "UpdateSnapshot sn-5 failed", s.UpdateSnapshot(ctx(t), sn))
	unsettled("after updates", "sn-1", "sn-6", "sn-3")
	must(t, "DeleteSnapshot sn-3", s.DeleteSnapshot(ctx(t), "sn-3"))
	unsettled("after delete", "sn-1", "sn-6")
}

func testSnapshotInvalid(t *testing.T, s store.Store) {
	tn := newTenant(t, s, "a", at(1))
	good := newSnapshot("sn-1", tn.ID, "sb-x", at(1))
	for _, tc := range []struct {
		name   string
		change func(*store.Snapshot)
	}{
		{"empty id", func(sn *store.Snapshot) { sn.ID = "" }},
		{"empty sandbox", func(sn *store.Snapshot) { sn.SandboxID = "" }},
		{"empty tenant", func(sn *store.Snapshot) { sn.Tenant = "" }},
		{"empty kind", func(sn *store.Snapshot) { sn.Kind = "" }},
		{"unknown kind", func(sn *store.Snapshot) { sn.Kind = "memory" }},
		{"empty state", func(sn *store.Snapshot) { sn.State = "" }},
		{"unknown state", func(sn *store.Snapshot) { sn.State = "gone" }},
	} {
		sn := good
		tc.change(&sn)
		wantClass(t, "CreateSnapshot "+tc.name, s.CreateSnapshot(ctx(t), sn), errdefs.ErrInvalidArgument)
	}
	list, err := s.ListSnapshots(ctx(t), store.SnapshotFilter{})
	must(t, "ListSnapshots", err)
	if len(list) != 0 {
		t.Fatalf("invalid snapshots were stored: %v", snapshotIDs(list))
	}

	must(t, "CreateSnapshot", s.CreateSnapshot(ctx(t), good))
	bad := good
	bad.State = "gone"
	wantClass(t, "UpdateSnapshot unknown state", s.UpdateSnapshot(ctx(t), bad), errdefs.ErrInvalidArgument)
	bad = good
	bad.ID = ""
	wantClass(t, "UpdateSnapshot empty id", s.UpdateSnapshot(ctx(t), bad), errdefs.ErrInvalidArgument)
	got, err := s.GetSnapshot(ctx(t), tn.ID, good.ID)
	must(t, "GetSnapshot", err)
	checkSnapshot(t, "after refused updates", got, good)
}

// testSnapshotRoundTrip checks that every field survives a write and a read,
// and that an update writes the mutable fields only.
func testSnapshotRoundTrip(t *testing.T, s store.Store) {
	tn := newTenant(t, s, "a", at(1))
	sn := store.Snapshot{
		ID: "sn-full", SandboxID: "sb-x", Tenant: tn.ID, Kind: store.SnapshotFull, Tier: "1h",
		State: store.SnapshotCreating, Reason: "", Node: "node-7", Runtime: "vm", Template: "base ✓",
		CPUs: 4, MemoryMiB: 4096, Generation: 1 << 40, SizeBytes: 0, Artifacts: "", CreatedAt: at(3),
	}
	must(t, "CreateSnapshot", s.CreateSnapshot(ctx(t), sn))
	got, err := s.GetSnapshot(ctx(t), tn.ID, sn.ID)
	must(t, "GetSnapshot", err)
	checkSnapshot(t, "after create", got, sn)
	created := got.UpdatedAt

	// Try to change every field; only the mutable ones may land.
	upd := store.Snapshot{
		ID: sn.ID, SandboxID: "sb-other", Tenant: "t-other00000000000", Kind: store.SnapshotDisk, Tier: "manual",
		State: store.SnapshotFailed, Reason: `upload "disk": 503`, Node: "", Runtime: "ns", Template: "other",
		CPUs: 1, MemoryMiB: 128, Generation: 2, SizeBytes: 1<<33 + 5, Artifacts: `{"disk":"s3://b/k"}`,
		CreatedAt: at(50), UpdatedAt: at(51),
	}
	must(t, "UpdateSnapshot", s.UpdateSnapshot(ctx(t), upd))
	want := sn
	want.State, want.Reason, want.Node, want.SizeBytes, want.Artifacts = upd.State, upd.Reason, upd.Node, upd.SizeBytes, upd.Artifacts
	got, err = s.GetSnapshot(ctx(t), tn.ID, sn.ID)
	must(t, "GetSnapshot after update", err)
	checkSnapshot(t, "after update", got, want)
	if got.UpdatedAt.Before(created) || got.UpdatedAt.Equal(at(51)) {
		t.Errorf("UpdatedAt after update = %v, want the store's clock (>= %v), not the caller's", got.UpdatedAt, created)
	}

	// A zero CreatedAt is filled in.
	now := time.Now()
	fresh := newSnapshot("sn-now", tn.ID, "sb-x", time.Time{})
	must(t, "CreateSnapshot without CreatedAt", s.CreateSnapshot(ctx(t), fresh))
	got, err = s.GetSnapshot(ctx(t), "", fresh.ID)
	must(t, "GetSnapshot", err)
	if got.CreatedAt.IsZero() || got.CreatedAt.Before(now.Add(-time.Hour)) {
		t.Errorf("CreatedAt = %v, want now (about %v)", got.CreatedAt, now)
	}
}

func testSnapshotTenantIsolation(t *testing.T, s store.Store) {
	a := newTenant(t, s, "a", at(1))
	b := newTenant(t, s, "b", at(1))
	sn := newSnapshot("sn-1", a.ID, "sb-x", at(1))
	must(t, "CreateSnapshot", s.CreateSnapshot(ctx(t), sn))
	_, err := s.GetSnapshot(ctx(t), b.ID, sn.ID)
	wantClass(t, "GetSnapshot of another tenant", err, errdefs.ErrNotFound)
	_, err = s.GetSnapshot(ctx(t), a.ID, "sn-missing")
	wantClass(t, "GetSnapshot missing", err, errdefs.ErrNotFound)
	if got, err := s.GetSnapshot(ctx(t), a.ID, sn.ID); err != nil || got.ID != sn.ID || got.Tenant != a.ID {
		t.Fatalf("GetSnapshot own = %+v, %v", got, err)
	}
}

// testSnapshotsOutliveSandbox checks that deleting a sandbox leaves its
// snapshot rows, and that a tenant with snapshot rows is not deleted.
func testSnapshotsOutliveSandbox(t *testing.T, s store.Store) {
	tn := newTenant(t, s, "a", at(1))
	sb := newSandbox(t, s, tn.ID, at(1))
	sn := newSnapshot("sn-1", tn.ID, sb.ID, at(2))
	must(t, "CreateSnapshot", s.CreateSnapshot(ctx(t), sn))
	must(t, "DeleteSandbox", s.DeleteSandbox(ctx(t), sb.ID))

	got, err := s.GetSnapshot(ctx(t), tn.ID, sn.ID)
	must(t, "GetSnapshot after its sandbox was deleted", err)
	checkSnapshot(t, "after sandbox delete", got, sn)
	list, err := s.ListSnapshots(ctx(t), store.SnapshotFilter{SandboxID: sb.ID})
	must(t, "ListSnapshots of deleted sandbox", err)
	if ids := snapshotIDs(list); !equalStrings(ids, []string{sn.ID}) {
		t.Fatalf("ListSnapshots of deleted sandbox = %v, want [%s]", ids, sn.ID)
	}
	sn.State = store.SnapshotDeleting
	must(t, "UpdateSnapshot after its sandbox was deleted", s.UpdateSnapshot(ctx(t), sn))

	wantClass(t, "DeleteTenant with a snapshot", s.DeleteTenant(ctx(t), tn.ID), errdefs.ErrConflict)
	if _, err := s.GetSnapshot(ctx(t), tn.ID, sn.ID); err != nil {
		t.Fatalf("snapshot gone after refused tenant delete: %v", err)
	}
	must(t, "DeleteSnapshot", s.DeleteSnapshot(ctx(t), sn.ID))
	must(t, "DeleteTenant after its snapshots", s.DeleteTenant(ctx(t), tn.ID))
}
