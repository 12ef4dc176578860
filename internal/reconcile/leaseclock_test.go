package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// aheadStore is a store whose clock runs ahead of the replica's: every lease
// it grants or renews expires, by its answer, ahead later than it does.
// With unreachable set, renewals fail as Unavailable.
type aheadStore struct {
	store.Store
	ahead       time.Duration
	unreachable bool
}

func (s *aheadStore) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	l, err := s.Store.AcquireLease(ctx, name, holder, ttl)
	l.Expires = l.Expires.Add(s.ahead)
	return l, err
}

func (s *aheadStore) RenewLease(ctx context.Context, l store.Lease, ttl time.Duration) (store.Lease, error) {
	if s.unreachable {
		return store.Lease{}, errors.New("store unreachable: " + errdefs.ErrUnavailable.Error())
	}
	l, err := s.Store.RenewLease(ctx, l, ttl)
	l.Expires = l.Expires.Add(s.ahead)
	return l, err
}

// TestLeaseDeadlineIsLocal (F-8): a pass's lease deadline is counted on the
// replica's own clock from before its request, whatever expiry the store
// answers — a store whose clock is an hour ahead must not make a pass that
// cannot renew believe it holds its lease for an hour; with the store
// unreachable from the claim on, the pass gives its lease up within the
// TTL.
func TestLeaseDeadlineIsLocal(t *testing.T) {
	const ttl = 600 * time.Millisecond
	st := &aheadStore{Store: openStore(t), ahead: time.Hour}
	r := New(Config{LeaseTTL: ttl, Replica: "r1"}, st, nil, slog.New(slog.NewTextHandler(t.Output(), nil)))
	ctx := t.Context()
	l, ok, err := r.claim(ctx, "sb-ahead")
	answered := time.Now()
	if err != nil || !ok {
		t.Fatalf("claim = %v, %v", ok, err)
	}
	if l.Expires.After(answered.Add(ttl)) {
		t.Errorf("claimed lease expires %v after the claim was answered; want at most the TTL %v (the store's clock is an hour ahead)", l.Expires.Sub(answered), ttl)
	}
	// Renewals fail from now on: keepLease must cancel the pass once the
	// local deadline passes, not an hour later.
	st.unreachable = true
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c := &claim{cancel: cancel, lease: l}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); r.keepLease(pctx, c, stop) }()
	select {
	case <-pctx.Done():
		if !errors.Is(context.Cause(pctx), errLeaseLost) {
			t.Errorf("the pass ended with %v, want its lease lost", context.Cause(pctx))
		}
	case <-time.After(10 * time.Second):
		t.Error("a pass that could not renew its lease kept it for 10 s (its TTL is 600 ms): the deadline follows the store's clock")
	}
	close(stop)
	<-done
}
