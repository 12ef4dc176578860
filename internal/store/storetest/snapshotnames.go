package storetest

import (
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// testSnapshotNames checks that a name is unique within its tenant and
// moves when given to another snapshot, that another tenant neither sees
// it nor can name its snapshot, and that deleting a snapshot deletes its
// names.
func testSnapshotNames(t *testing.T, s store.Store) {
	a := newTenant(t, s, "a", at(1))
	b := newTenant(t, s, "b", at(1))
	one := newSnapshot("sn-1", a.ID, "sb-x", at(1))
	two := newSnapshot("sn-2", a.ID, "sb-x", at(2))
	theirs := newSnapshot("sn-3", b.ID, "sb-y", at(2))
	for _, sn := range []store.Snapshot{one, two, theirs} {
		must(t, "CreateSnapshot", s.CreateSnapshot(ctx(t), sn))
	}
	must(t, "SetSnapshotName", s.SetSnapshotName(ctx(t), store.SnapshotName{Tenant: a.ID, Name: "mine", SnapshotID: one.ID, CreatedAt: at(3)}))
	got, err := s.GetSnapshotName(ctx(t), a.ID, "mine")
	if err != nil || got.SnapshotID != one.ID || got.Tenant != a.ID || !got.CreatedAt.Equal(at(3)) {
		t.Fatalf("GetSnapshotName = %+v, %v; want %s at %s", got, err, one.ID, at(3))
	}
	_, err = s.GetSnapshotName(ctx(t), b.ID, "mine")
	wantClass(t, "GetSnapshotName of another tenant", err, errdefs.ErrNotFound)
	wantClass(t, "SetSnapshotName of another tenant's snapshot",
		s.SetSnapshotName(ctx(t), store.SnapshotName{Tenant: a.ID, Name: "stolen", SnapshotID: theirs.ID}), errdefs.ErrNotFound)
	wantClass(t, "SetSnapshotName of a missing snapshot",
		s.SetSnapshotName(ctx(t), store.SnapshotName{Tenant: a.ID, Name: "none", SnapshotID: "sn-missing"}), errdefs.ErrNotFound)
	wantClass(t, "SetSnapshotName without a name",
		s.SetSnapshotName(ctx(t), store.SnapshotName{Tenant: a.ID, SnapshotID: one.ID}), errdefs.ErrInvalidArgument)
	// The same name in another tenant is another name.
	must(t, "SetSnapshotName in tenant b", s.SetSnapshotName(ctx(t), store.SnapshotName{Tenant: b.ID, Name: "mine", SnapshotID: theirs.ID}))

	// Naming another snapshot moves the name.
	must(t, "SetSnapshotName again", s.SetSnapshotName(ctx(t), store.SnapshotName{Tenant: a.ID, Name: "mine", SnapshotID: two.ID, CreatedAt: at(4)}))
	must(t, "SetSnapshotName second", s.SetSnapshotName(ctx(t), store.SnapshotName{Tenant: a.ID, Name: "also", SnapshotID: two.ID}))
	if got, err := s.GetSnapshotName(ctx(t), a.ID, "mine"); err != nil || got.SnapshotID != two.ID || !got.CreatedAt.Equal(at(4)) {
		t.Fatalf("GetSnapshotName after the move = %+v, %v; want %s", got, err, two.ID)
	}
	list, err := s.ListSnapshotNames(ctx(t), a.ID)
	must(t, "ListSnapshotNames", err)
	if len(list) != 2 || list[0].Name != "also" || list[1].Name != "mine" || list[0].SnapshotID != two.ID || list[1].SnapshotID != two.ID {
		t.Fatalf("ListSnapshotNames = %+v, want also and mine, both %s", list, two.ID)
	}

	must(t, "DeleteSnapshot", s.DeleteSnapshot(ctx(t), two.ID))
	_, err = s.GetSnapshotName(ctx(t), a.ID, "mine")
	wantClass(t, "GetSnapshotName after its snapshot was deleted", err, errdefs.ErrNotFound)
	if list, err := s.ListSnapshotNames(ctx(t), a.ID); err != nil || len(list) != 0 {
		t.Fatalf("ListSnapshotNames after the delete = %+v, %v; want none", list, err)
	}
	if got, err := s.GetSnapshotName(ctx(t), b.ID, "mine"); err != nil || got.SnapshotID != theirs.ID {
		t.Fatalf("tenant b's name after a's delete = %+v, %v", got, err)
	}
}
