package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// testLeaseTakeover checks TakeOverLease, by which a replica takes the
// lease of a holder it found gone without waiting for the lease to expire,
// and the LeaseHeldError that names that holder.
func testLeaseTakeover(t *testing.T, s store.Store) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"HeldErrorNamesTheHolder", testLeaseHeldErrorNamesTheHolder},
		{"FromALiveHolder", testLeaseTakeoverFromALiveHolder},
		{"TokenAsAfterExpiry", testLeaseTakeoverTokenAsAfterExpiry},
		{"OnlyFromTheHolder", testLeaseTakeoverOnlyFromTheHolder},
		{"Invalid", testLeaseTakeoverInvalid},
		{"Race", testLeaseTakeoverRace},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, s) })
	}
}

func takeOver(t *testing.T, s store.Store, name, from, to string) store.Lease {
	t.Helper()
	l, err := s.TakeOverLease(ctx(t), name, from, to, leaseTTL)
	must(t, fmt.Sprintf("TakeOverLease(%s, %s → %s)", name, from, to), err)
	if l.Name != name || l.Holder != to || !l.Expires.After(time.Now().Add(-time.Minute)) {
		t.Fatalf("TakeOverLease(%s, %s → %s) = %+v", name, from, to, l)
	}
	return l
}

func testLeaseHeldErrorNamesTheHolder(t *testing.T, s store.Store) {
	a := acquire(t, s, "held", "replica-a", leaseTTL)
	_, err := s.AcquireLease(ctx(t), "held", "replica-b", leaseTTL)
	wantClass(t, "AcquireLease of a live lease", err, errdefs.ErrConflict)
	var held *store.LeaseHeldError
	if !errors.As(err, &held) {
		t.Fatalf("AcquireLease of a live lease: err = %v (%T), want a *store.LeaseHeldError", err, err)
	}
	if held.Name != "held" || held.Holder != "replica-a" || held.Token != a.Token {
		t.Errorf("LeaseHeldError = %+v, want lease held, holder replica-a, token %d", held, a.Token)
	}
}

// testLeaseTakeoverFromALiveHolder: the lease is taken before it expires,
// and the former holder is fenced off exactly as after an expiry.
func testLeaseTakeoverFromALiveHolder(t *testing.T, s store.Store) {
	a := acquire(t, s, "taken", "replica-a", leaseTTL)
	b := takeOver(t, s, "taken", "replica-a", "replica-b")
	if b.Token <= a.Token {
		t.Fatalf("take-over token = %d, want more than the former holder's %d", b.Token, a.Token)
	}
	_, err := s.RenewLease(ctx(t), a, leaseTTL)
	wantClass(t, "former holder's RenewLease after a take-over", err, errdefs.ErrConflict)
	wantClass(t, "former holder's ReleaseLease after a take-over", s.ReleaseLease(ctx(t), a), errdefs.ErrConflict)
	_, err = s.AcquireLease(ctx(t), "taken", "replica-a", leaseTTL)
	var held *store.LeaseHeldError
	if !errors.As(err, &held) || held.Holder != "replica-b" || held.Token != b.Token {
		t.Fatalf("former holder's AcquireLease after a take-over: err = %v, want held by replica-b with token %d", err, b.Token)
	}
	if _, err := s.RenewLease(ctx(t), b, leaseTTL); err != nil {
		t.Errorf("new holder's RenewLease: %v", err)
	}
	must(t, "new holder's ReleaseLease", s.ReleaseLease(ctx(t), b))
	c := acquire(t, s, "taken", "replica-c", leaseTTL)
	if c.Token <= b.Token {
		t.Errorf("token after the taken-over lease was released = %d, want more than %d", c.Token, b.Token)
	}
}

// testLeaseTakeoverTokenAsAfterExpiry: a take-over advances the token by
// what an acquisition after expiry does, live or expired.
func testLeaseTakeoverTokenAsAfterExpiry(t *testing.T, s store.Store) {
	a := acquire(t, s, "by-expiry", "replica-a", shortTTL)
	time.Sleep(shortTTL + 100*time.Millisecond)
	byExpiry := acquire(t, s, "by-expiry", "replica-b", leaseTTL)

	x := acquire(t, s, "by-takeover", "replica-a", leaseTTL)
	byTakeover := takeOver(t, s, "by-takeover", "replica-a", "replica-b")
	if got, want := byTakeover.Token-x.Token, byExpiry.Token-a.Token; got != want {
		t.Errorf("take-over advanced the token by %d, an acquisition after expiry by %d", got, want)
	}

	// An expired lease still naming its holder is taken over as well.
	y := acquire(t, s, "expired", "replica-a", shortTTL)
	time.Sleep(shortTTL + 100*time.Millisecond)
	if z := takeOver(t, s, "expired", "replica-a", "replica-b"); z.Token <= y.Token {
		t.Errorf("take-over of an expired lease: token %d, want more than %d", z.Token, y.Token)
	}
}

// testLeaseTakeoverOnlyFromTheHolder: the take-over is refused when the
// named holder no longer holds the lease (it was released, or taken by
// another since the caller looked), and for an unknown name.
func testLeaseTakeoverOnlyFromTheHolder(t *testing.T, s store.Store) {
	acquire(t, s, "moved", "replica-a", leaseTTL)
	b := takeOver(t, s, "moved", "replica-a", "replica-b")
	_, err := s.TakeOverLease(ctx(t), "moved", "replica-a", "replica-c", leaseTTL)
	wantClass(t, "TakeOverLease from a holder that lost the lease", err, errdefs.ErrConflict)
	if _, err := s.RenewLease(ctx(t), b, leaseTTL); err != nil {
		t.Errorf("the holder's RenewLease after a refused take-over: %v", err)
	}

	r := acquire(t, s, "released", "replica-a", leaseTTL)
	must(t, "ReleaseLease", s.ReleaseLease(ctx(t), r))
	_, err = s.TakeOverLease(ctx(t), "released", "replica-a", "replica-b", leaseTTL)
	wantClass(t, "TakeOverLease of a released lease", err, errdefs.ErrConflict)

	_, err = s.TakeOverLease(ctx(t), "no-such-lease", "replica-a", "replica-b", leaseTTL)
	wantClass(t, "TakeOverLease of an unknown name", err, errdefs.ErrNotFound)
}

func testLeaseTakeoverInvalid(t *testing.T, s store.Store) {
	acquire(t, s, "n", "a", leaseTTL)
	for _, tc := range []struct {
		name, from, to string
		ttl            time.Duration
	}{
		{"", "a", "b", leaseTTL},
		{"n", "", "b", leaseTTL},
		{"n", "a", "", leaseTTL},
		{"n", "a", "a", leaseTTL},
		{"n", "a", "b", 0},
		{"n", "a", "b", -time.Second},
	} {
		_, err := s.TakeOverLease(ctx(t), tc.name, tc.from, tc.to, tc.ttl)
		wantClass(t, fmt.Sprintf("TakeOverLease(%q, %q → %q, %v)", tc.name, tc.from, tc.to, tc.ttl), err, errdefs.ErrInvalidArgument)
	}
}

// testLeaseTakeoverRace: of replicas racing to take over from the same gone
// holder exactly one wins; the others get ErrConflict.
func testLeaseTakeoverRace(t *testing.T, s store.Store) {
	acquire(t, s, "contested", "gone", leaseTTL)
	exactlyOneWins(t, "took the lease over", func(i int) error {
		_, err := s.TakeOverLease(ctx(t), "contested", "gone", fmt.Sprintf("replica-%d", i), leaseTTL)
		return err
	})
}
