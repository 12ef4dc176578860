// Package storetest is the conformance suite of the store.Store contract. Every
// backend runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return openFresh(t) })
//	}
//
// newStore must return an empty store that the suite may write to; the suite
// closes it at the end of each subtest.
package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// Run runs every conformance test against stores made by newStore.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Tenants", testTenants},
		{"TenantDeleteWithSandboxes", testTenantDeleteWithSandboxes},
		{"APIKeys", testAPIKeys},
		{"Sandboxes", testSandboxes},
		{"SandboxRoundTrip", testSandboxRoundTrip},
		{"SandboxTenantIsolation", testSandboxTenantIsolation},
		{"SandboxOptimisticConcurrency", testSandboxOptimisticConcurrency},
		{"SandboxConcurrentUpdates", testSandboxConcurrentUpdates},
		{"Templates", testTemplates},
		{"Nodes", testNodes},
		{"NodeReports", testNodeReports},
		{"MarkNodeDown", testMarkNodeDown},
		{"RecordHeartbeat", testRecordHeartbeat},
		{"RecordHeartbeatDrainRace", testRecordHeartbeatDrainRace},
		{"Idempotency", testIdempotency},
		{"Events", testEvents},
		{"SandboxEvents", testSandboxEvents}, // records.go
		{"Snapshots", testSnapshots},
		{"UnsettledSnapshots", testUnsettledSnapshots},
		{"SnapshotInvalid", testSnapshotInvalid},
		{"SnapshotRoundTrip", testSnapshotRoundTrip},
		{"SnapshotTenantIsolation", testSnapshotTenantIsolation},
		{"SnapshotsOutliveSandbox", testSnapshotsOutliveSandbox},
		{"SnapshotNames", testSnapshotNames}, // snapshotnames.go
		{"Credentials", testCredentials},
		{"ServicePorts", testServicePorts},
		{"Leases", testLeases},
		{"LeaseTakeover", testLeaseTakeover}, // takeover.go
		{"TenantQuota", testTenantQuota},
		{"TenantUsage", testTenantUsage},
		{"NodeUsage", testNodeUsage},
		{"CreateWithinQuota", testCreateWithinQuota},
		{"UpdateWithinQuota", testUpdateWithinQuota},
		{"ConcurrentAdmissions", testConcurrentAdmissions},
		{"CreateAfterTemplateDeleted", testCreateAfterTemplateDeleted}, // templaterace.go
		{"TemplateDeleteRacesCreates", testTemplateDeleteRacesCreates}, // templaterace.go
		{"ReplicaAddresses", testReplicaAddresses},                     // replicas.go
		{"MetricHistory", testMetricHistory},                           // metrics.go
		{"TemplateBuilds", testTemplateBuilds},                         // templatebuilds.go
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

// ctx returns a context that ends with the test.
func ctx(t *testing.T) context.Context { return t.Context() }

// wantClass fails the test unless err is of class want.
func wantClass(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
}

// must fails the test on err.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// at returns a fixed, distinct time for ordering tests.
func at(minute int) time.Time {
	return time.Date(2026, 3, 4, 5, minute, 7, 123456789, time.UTC)
}

func newTenant(t *testing.T, s store.Store, name string, created time.Time) store.Tenant {
	t.Helper()
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: name, CreatedAt: created}
	must(t, "CreateTenant", s.CreateTenant(ctx(t), tn))
	return tn
}

func newSandbox(t *testing.T, s store.Store, tenant string, created time.Time) *sandbox.Sandbox {
	t.Helper()
	sb := sandbox.New(tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 128, DiskMiB: 512}, created)
	must(t, "CreateSandbox", s.CreateSandbox(ctx(t), sb))
	return sb
}

func testTenants(t *testing.T, s store.Store) {
	list, err := s.ListTenants(ctx(t))
	must(t, "ListTenants on empty store", err)
	if list == nil || len(list) != 0 {
		t.Fatalf("ListTenants on empty store = %#v, want empty non-nil", list)
	}
	b := newTenant(t, s, "bravo", at(2))
	a := newTenant(t, s, "alpha", at(1))
	wantClass(t, "CreateTenant duplicate", s.CreateTenant(ctx(t), a), errdefs.ErrConflict)

	got, err := s.GetTenant(ctx(t), a.ID)
	must(t, "GetTenant", err)
	if got.ID != a.ID || got.Name != "alpha" || !got.CreatedAt.Equal(a.CreatedAt) {
		t.Errorf("GetTenant = %+v, want %+v", got, a)
	}
	_, err = s.GetTenant(ctx(t), "t-doesnotexist0000")
	wantClass(t, "GetTenant missing", err, errdefs.ErrNotFound)

	list, err = s.ListTenants(ctx(t))
	must(t, "ListTenants", err)
	if len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID {
		t.Fatalf("ListTenants = %+v, want [alpha bravo] oldest first", list)
	}

	key := store.APIKey{ID: sandbox.NewKeyID(), Tenant: a.ID, Hash: "h"}
	must(t, "CreateAPIKey", s.CreateAPIKey(ctx(t), key))
	must(t, "DeleteTenant", s.DeleteTenant(ctx(t), a.ID))
	_, err = s.GetTenant(ctx(t), a.ID)
	wantClass(t, "GetTenant after delete", err, errdefs.ErrNotFound)
	_, err = s.GetAPIKey(ctx(t), key.ID)
	wantClass(t, "GetAPIKey of deleted tenant", err, errdefs.ErrNotFound)
	wantClass(t, "DeleteTenant again", s.DeleteTenant(ctx(t), a.ID), errdefs.ErrNotFound)
}

func testTenantDeleteWithSandboxes(t *testing.T, s store.Store) {
	tn := newTenant(t, s, "busy", at(1))
	sb := newSandbox(t, s, tn.ID, at(2))
	wantClass(t, "DeleteTenant with a sandbox", s.DeleteTenant(ctx(t), tn.ID), errdefs.ErrConflict)
	if _, err := s.GetTenant(ctx(t), tn.ID); err != nil {
		t.Fatalf("tenant gone after refused delete: %v", err)
	}
	must(t, "DeleteSandbox", s.DeleteSandbox(ctx(t), sb.ID))
	must(t, "DeleteTenant after its sandboxes", s.DeleteTenant(ctx(t), tn.ID))
}

func testAPIKeys(t *testing.T, s store.Store) {
	a := newTenant(t, s, "a", at(1))
	b := newTenant(t, s, "b", at(1))
	k1 := store.APIKey{ID: sandbox.NewKeyID(), Tenant: a.ID, Hash: "hash-1", Admin: true, CreatedAt: at(1)}
	k2 := store.APIKey{ID: sandbox.NewKeyID(), Tenant: a.ID, Hash: "hash-2", CreatedAt: at(2)}
	k3 := store.APIKey{ID: sandbox.NewKeyID(), Tenant: b.ID, Hash: "hash-3", CreatedAt: at(3)}
	for _, k := range []store.APIKey{k2, k1, k3} {
		must(t, "CreateAPIKey", s.CreateAPIKey(ctx(t), k))
	}
	wantClass(t, "CreateAPIKey duplicate", s.CreateAPIKey(ctx(t), k1), errdefs.ErrConflict)
	orphan := store.APIKey{ID: sandbox.NewKeyID(), Tenant: "t-nosuchtenant000", Hash: "h"}
	wantClass(t, "CreateAPIKey unknown tenant", s.CreateAPIKey(ctx(t), orphan), errdefs.ErrNotFound)

	got, err := s.GetAPIKey(ctx(t), k1.ID)
	must(t, "GetAPIKey", err)
	if got.Tenant != a.ID || got.Hash != "hash-1" || !got.Admin || got.Revoked() || !got.CreatedAt.Equal(k1.CreatedAt) {
		t.Errorf("GetAPIKey = %+v, want %+v", got, k1)
	}
	_, err = s.GetAPIKey(ctx(t), "k-nosuchkey00000")
	wantClass(t, "GetAPIKey missing", err, errdefs.ErrNotFound)

	list, err := s.ListAPIKeys(ctx(t), a.ID)
	must(t, "ListAPIKeys", err)
	if len(list) != 2 || list[0].ID != k1.ID || list[1].ID != k2.ID {
		t.Fatalf("ListAPIKeys(a) = %+v, want [k1 k2]", list)
	}

	must(t, "RevokeAPIKey", s.RevokeAPIKey(ctx(t), k2.ID, at(5)))
	got, err = s.GetAPIKey(ctx(t), k2.ID)
	must(t, "GetAPIKey revoked", err)
	if !got.Revoked() || !got.RevokedAt.Equal(at(5)) {
		t.Fatalf("after revoke: RevokedAt = %v, want %v", got.RevokedAt, at(5))
	}
	must(t, "RevokeAPIKey again", s.RevokeAPIKey(ctx(t), k2.ID, at(9)))
	got, _ = s.GetAPIKey(ctx(t), k2.ID)
	if !got.RevokedAt.Equal(at(5)) {
		t.Errorf("second revoke moved RevokedAt to %v, want first time %v", got.RevokedAt, at(5))
	}
	wantClass(t, "RevokeAPIKey missing", s.RevokeAPIKey(ctx(t), "k-nosuchkey00000", at(5)), errdefs.ErrNotFound)
	if got, _ := s.GetAPIKey(ctx(t), k1.ID); got.Revoked() {
		t.Error("revoking k2 revoked k1")
	}
}

func testSandboxes(t *testing.T, s store.Store) {
	a := newTenant(t, s, "a", at(1))
	b := newTenant(t, s, "b", at(1))
	sa1 := newSandbox(t, s, a.ID, at(1))
	sa2 := newSandbox(t, s, a.ID, at(2))
	sb1 := newSandbox(t, s, b.ID, at(3))
	if sa1.Version != 1 || sa1.UpdatedAt.IsZero() {
		t.Fatalf("after create: Version %d UpdatedAt %v, want 1 and set", sa1.Version, sa1.UpdatedAt)
	}
	wantClass(t, "CreateSandbox duplicate", s.CreateSandbox(ctx(t), sa1.Clone()), errdefs.ErrConflict)
	orphan := sandbox.New("t-nosuchtenant000", sandbox.Spec{Template: "minimal"}, at(1))
	wantClass(t, "CreateSandbox unknown tenant", s.CreateSandbox(ctx(t), orphan), errdefs.ErrNotFound)

	sa2.Node = "node-2"
	must(t, "UpdateSandbox", s.UpdateSandbox(ctx(t), sa2))
	sb1.Node = "node-2"
	must(t, "UpdateSandbox", s.UpdateSandbox(ctx(t), sb1))

	ids := func(list []*sandbox.Sandbox) []string {
		var out []string
		for _, sb := range list {
			out = append(out, sb.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    store.SandboxFilter
		want []string
	}{
		{"all", store.SandboxFilter{}, []string{sa1.ID, sa2.ID, sb1.ID}},
		{"tenant a", store.SandboxFilter{Tenant: a.ID}, []string{sa1.ID, sa2.ID}},
		{"tenant b", store.SandboxFilter{Tenant: b.ID}, []string{sb1.ID}},
		{"node-2", store.SandboxFilter{Node: "node-2"}, []string{sa2.ID, sb1.ID}},
		{"tenant a on node-2", store.SandboxFilter{Tenant: a.ID, Node: "node-2"}, []string{sa2.ID}},
		{"unknown node", store.SandboxFilter{Node: "node-9"}, nil},
	} {
		list, err := s.ListSandboxes(ctx(t), tc.f)
		must(t, "ListSandboxes "+tc.name, err)
		if list == nil {
			t.Errorf("ListSandboxes %s = nil, want non-nil", tc.name)
		}
		if got := ids(list); !equalStrings(got, tc.want) {
			t.Errorf("ListSandboxes %s = %v, want %v", tc.name, got, tc.want)
		}
	}

	must(t, "DeleteSandbox", s.DeleteSandbox(ctx(t), sa1.ID))
	_, err := s.GetSandboxByID(ctx(t), sa1.ID)
	wantClass(t, "GetSandboxByID after delete", err, errdefs.ErrNotFound)
	wantClass(t, "DeleteSandbox again", s.DeleteSandbox(ctx(t), sa1.ID), errdefs.ErrNotFound)
	wantClass(t, "UpdateSandbox deleted", s.UpdateSandbox(ctx(t), sa1), errdefs.ErrNotFound)
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
