package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// leaseTTL is long enough for no test step to outlive it by accident;
// shortTTL is the one tests wait out.
const (
	leaseTTL = time.Minute
	shortTTL = 300 * time.Millisecond
)

// testLeases checks the lease contract: exclusion, renewal, release,
// expiry and take-over with a fenced-off former holder, token growth and a
// race of acquirers.
func testLeases(t *testing.T, s store.Store) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Basics", testLeaseBasics},
		{"Invalid", testLeaseInvalid},
		{"ExpiredHolderFencedOff", testLeaseExpiredHolderFencedOff},
		{"TokenGrows", testLeaseTokenGrows},
		{"AcquireRace", testLeaseAcquireRace},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, s) })
	}
}

func acquire(t *testing.T, s store.Store, name, holder string, ttl time.Duration) store.Lease {
	t.Helper()
	l, err := s.AcquireLease(ctx(t), name, holder, ttl)
	must(t, fmt.Sprintf("AcquireLease(%s, %s)", name, holder), err)
	if l.Name != name || l.Holder != holder || l.Token <= 0 || !l.Expires.After(time.Now().Add(-time.Minute)) {
		t.Fatalf("AcquireLease(%s, %s) = %+v", name, holder, l)
	}
	return l
}

func testLeaseBasics(t *testing.T, s store.Store) {
	a := acquire(t, s, "leader", "replica-a", leaseTTL)
	_, err := s.AcquireLease(ctx(t), "leader", "replica-b", leaseTTL)
	wantClass(t, "AcquireLease of a live lease by another holder", err, errdefs.ErrConflict)

	// Acquiring again as the holder renews and keeps the token.
	again := acquire(t, s, "leader", "replica-a", leaseTTL)
	if again.Token != a.Token || again.Expires.Before(a.Expires) {
		t.Errorf("re-acquire by the holder = %+v, want token %d and an expiry from %v on", again, a.Token, a.Expires)
	}
	renewed, err := s.RenewLease(ctx(t), a, 2*leaseTTL)
	must(t, "RenewLease", err)
	if renewed.Token != a.Token || renewed.Holder != a.Holder || !renewed.Expires.After(again.Expires) {
		t.Errorf("RenewLease = %+v, want token %d and an expiry after %v", renewed, a.Token, again.Expires)
	}
	// Another name is independent.
	acquire(t, s, "shard-1", "replica-b", leaseTTL)

	must(t, "ReleaseLease", s.ReleaseLease(ctx(t), renewed))
	must(t, "ReleaseLease again", s.ReleaseLease(ctx(t), renewed))
	_, err = s.RenewLease(ctx(t), renewed, leaseTTL)
	wantClass(t, "RenewLease of a released lease", err, errdefs.ErrConflict)
	b := acquire(t, s, "leader", "replica-b", leaseTTL)
	if b.Token <= a.Token {
		t.Errorf("token after release and re-acquire = %d, want more than %d", b.Token, a.Token)
	}
	wantClass(t, "ReleaseLease of a lease taken since", s.ReleaseLease(ctx(t), renewed), errdefs.ErrConflict)
	if _, err := s.RenewLease(ctx(t), b, leaseTTL); err != nil {
		t.Errorf("the new holder's RenewLease after the old one's refused release: %v", err)
	}

	_, err = s.RenewLease(ctx(t), store.Lease{Name: "no-such-lease", Holder: "x", Token: 1}, leaseTTL)
	wantClass(t, "RenewLease unknown", err, errdefs.ErrNotFound)
	wantClass(t, "ReleaseLease unknown", s.ReleaseLease(ctx(t), store.Lease{Name: "no-such-lease", Holder: "x", Token: 1}), errdefs.ErrNotFound)
}

func testLeaseInvalid(t *testing.T, s store.Store) {
	for _, tc := range []struct {
		name, holder string
		ttl          time.Duration
	}{
		{"", "h", leaseTTL},
		{"n", "", leaseTTL},
		{"n", "h", 0},
		{"n", "h", -time.Second},
	} {
		_, err := s.AcquireLease(ctx(t), tc.name, tc.holder, tc.ttl)
		wantClass(t, fmt.Sprintf("AcquireLease(%q, %q, %v)", tc.name, tc.holder, tc.ttl), err, errdefs.ErrInvalidArgument)
	}
	l := acquire(t, s, "n", "h", leaseTTL)
	_, err := s.RenewLease(ctx(t), l, 0)
	wantClass(t, "RenewLease with ttl 0", err, errdefs.ErrInvalidArgument)
	wantClass(t, "ReleaseLease without a name", s.ReleaseLease(ctx(t), store.Lease{}), errdefs.ErrInvalidArgument)
}

// testLeaseExpiredHolderFencedOff: a holder that let its lease expire may
// still renew it while nobody took it, but once another holder has, the
// former holder's renew and release are refused, and its token is older.
func testLeaseExpiredHolderFencedOff(t *testing.T, s store.Store) {
	old := acquire(t, s, "fenced", "replica-a", shortTTL)
	time.Sleep(shortTTL + 100*time.Millisecond)
	revived, err := s.RenewLease(ctx(t), old, shortTTL)
	must(t, "RenewLease of an expired lease nobody took", err)
	if revived.Token != old.Token {
		t.Errorf("renewing an expired lease changed its token to %d, want %d", revived.Token, old.Token)
	}

	time.Sleep(shortTTL + 100*time.Millisecond)
	taken := acquire(t, s, "fenced", "replica-b", leaseTTL)
	if taken.Token <= old.Token {
		t.Fatalf("take-over token = %d, want more than the expired holder's %d", taken.Token, old.Token)
	}
	_, err = s.RenewLease(ctx(t), old, leaseTTL)
	wantClass(t, "expired holder's RenewLease after a take-over", err, errdefs.ErrConflict)
	wantClass(t, "expired holder's ReleaseLease after a take-over", s.ReleaseLease(ctx(t), old), errdefs.ErrConflict)
	_, err = s.AcquireLease(ctx(t), "fenced", "replica-a", leaseTTL)
	wantClass(t, "expired holder's AcquireLease while the new lease is live", err, errdefs.ErrConflict)
	if _, err := s.RenewLease(ctx(t), taken, leaseTTL); err != nil {
		t.Errorf("new holder's RenewLease: %v", err)
	}
}

// testLeaseTokenGrows passes one name between holders by release and by
// expiry: every acquisition by a new holder gets a strictly greater token.
func testLeaseTokenGrows(t *testing.T, s store.Store) {
	var last int64
	for i := range 6 {
		holder := fmt.Sprintf("replica-%d", i)
		ttl := leaseTTL
		if i%2 == 1 {
			ttl = shortTTL // this one expires instead of being released
		}
		l := acquire(t, s, "singleton", holder, ttl)
		if l.Token <= last {
			t.Fatalf("acquisition %d: token %d, want more than %d", i, l.Token, last)
		}
		last = l.Token
		if i%2 == 0 {
			must(t, "ReleaseLease", s.ReleaseLease(ctx(t), l))
		} else {
			time.Sleep(shortTTL + 100*time.Millisecond)
		}
	}
}

// testLeaseAcquireRace: of holders racing for a free lease exactly one wins;
// the others get ErrConflict.
func testLeaseAcquireRace(t *testing.T, s store.Store) {
	exactlyOneWins(t, "acquired the lease", func(i int) error {
		_, err := s.AcquireLease(ctx(t), "contested", fmt.Sprintf("replica-%d", i), leaseTTL)
		return err
	})
}

// exactlyOneWins runs race on 8 goroutines at once and fails t unless
// exactly one returns nil and the others ErrConflict; what says what the
// winner did.
func exactlyOneWins(t *testing.T, what string, race func(i int) error) {
	t.Helper()
	const racers = 8
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		wg.Go(func() { errs[i] = race(i) })
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errdefs.IsConflict(err):
			t.Errorf("racer %d: %v, want success or ErrConflict", i, err)
		}
	}
	if won != 1 {
		t.Errorf("%d racers %s, want exactly 1", won, what)
	}
}
