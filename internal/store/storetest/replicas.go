package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// testReplicaAddresses: each replica's addresses are listed until they
// expire, a second put replaces the first, and invalid puts are refused.
func testReplicaAddresses(t *testing.T, s store.Store) {
	ra, ok := s.(store.ReplicaAddresses)
	if !ok {
		t.Skip("the store does not implement ReplicaAddresses")
	}
	now := at(10)
	must(t, "Put a", ra.PutReplicaAddresses(ctx(t), "a", []string{"45.0.0.1", "2a01:4f8::1"}, now.Add(time.Minute), now))
	must(t, "Put b", ra.PutReplicaAddresses(ctx(t), "b", []string{"45.0.0.2"}, now.Add(time.Second), now))
	got, err := ra.ListReplicaAddresses(ctx(t), now)
	must(t, "List", err)
	slices.Sort(got)
	if want := []string{"2a01:4f8::1", "45.0.0.1", "45.0.0.2"}; !slices.Equal(got, want) {
		t.Fatalf("List = %q, want %q", got, want)
	}
	must(t, "Put a again", ra.PutReplicaAddresses(ctx(t), "a", []string{"45.0.0.3"}, now.Add(time.Minute), now))
	got, err = ra.ListReplicaAddresses(ctx(t), now.Add(2*time.Second))
	must(t, "List after b expired", err)
	if want := []string{"45.0.0.3"}; !slices.Equal(got, want) {
		t.Fatalf("List after a replaced its own and b expired = %q, want %q", got, want)
	}
	wantClass(t, "Put without a replica", ra.PutReplicaAddresses(ctx(t), "", nil, now, now), errdefs.ErrInvalidArgument)
	wantClass(t, "Put too many", ra.PutReplicaAddresses(ctx(t), "c", make([]string, store.MaxReplicaAddresses+1), now, now), errdefs.ErrInvalidArgument)
}
