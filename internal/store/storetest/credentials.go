package storetest

import (
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// testCredentials checks the credential index: round trip, tenant
// isolation, order, duplicates and deletion.
func testCredentials(t *testing.T, s store.Store) {
	a := newTenant(t, s, "a", at(1))
	b := newTenant(t, s, "b", at(1))
	c1 := store.Credential{ID: "cr-2", Tenant: a.ID, Name: "gh", Metadata: `{"injection":{"method":"header","name":"Authorization"}}`, CreatedAt: at(2)}
	c2 := store.Credential{ID: "cr-1", Tenant: a.ID, Project: "p", Sandbox: "sb123", Name: "npm", Metadata: `{}`, CreatedAt: at(3)}
	c3 := store.Credential{ID: "cr-3", Tenant: b.ID, Name: "other", Metadata: `{}`, CreatedAt: at(1)}
	for _, c := range []store.Credential{c1, c2, c3} {
		must(t, "CreateCredential "+c.ID, s.CreateCredential(ctx(t), c))
	}
	wantClass(t, "duplicate", s.CreateCredential(ctx(t), c1), errdefs.ErrConflict)

	got, err := s.GetCredential(ctx(t), a.ID, "cr-1")
	must(t, "GetCredential", err)
	if got != c2 {
		t.Errorf("GetCredential = %+v, want %+v", got, c2)
	}
	_, err = s.GetCredential(ctx(t), b.ID, "cr-1")
	wantClass(t, "other tenant's credential", err, errdefs.ErrNotFound)

	list, err := s.ListCredentials(ctx(t), a.ID)
	must(t, "ListCredentials", err)
	if len(list) != 2 || list[0] != c1 || list[1] != c2 {
		t.Errorf("ListCredentials(a) = %+v, want [%+v %+v] (oldest first)", list, c1, c2)
	}

	must(t, "DeleteCredential", s.DeleteCredential(ctx(t), "cr-2"))
	wantClass(t, "delete again", s.DeleteCredential(ctx(t), "cr-2"), errdefs.ErrNotFound)
	_, err = s.GetCredential(ctx(t), a.ID, "cr-2")
	wantClass(t, "deleted credential", err, errdefs.ErrNotFound)
	list, err = s.ListCredentials(ctx(t), b.ID)
	must(t, "ListCredentials(b)", err)
	if len(list) != 1 || list[0] != c3 {
		t.Errorf("ListCredentials(b) = %+v, want [%+v]", list, c3)
	}
}
