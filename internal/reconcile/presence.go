package reconcile

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/store"
)

// A replica killed mid-pass leaves its lease behind; waiting for it to
// expire (LeaseTTL, 15 s) would leave the sandbox undriven that long. On a
// store with presence (store.Presence: PostgreSQL) each replica is present
// while its reconciler runs, and a replica that finds a lease held takes it
// over at once when the holder is not present (claimed → takeOver), with a
// conditional write that names the gone holder and gives the lease a new
// fencing token.
//
// Presence can be wrong in one direction only: a replica that is alive but
// whose presence connection broke looks gone. Such a replica keeps running
// its passes (it is as able to drive sandboxes as before; stopping them
// would turn a broken connection into an outage of its work) while it
// becomes present again with backoff; a lease taken from it in the meantime
// costs it the pass: its next renewal or fence (before any node call or
// sandbox write) finds a newer token, and the pass is canceled. The worst
// case is a step driven twice, which node operations, idempotent per
// execution id, and the sandbox row's version check make harmless, as they
// do for a pass that outlived its lease.
//
// Only a replica that has itself been present for presenceSettle takes
// leases over: after an outage of the database every replica's presence
// is gone, and those that come back first would otherwise take every lease
// from those still reconnecting, and they in turn back. presenceSettle is
// longer than the store's wait between attempts to become present again
// (PostgreSQL: at most 2 s).

const (
	// presenceSettle is how long a replica must have been present before
	// it takes leases over from replicas that are not.
	presenceSettle = 3 * time.Second
	// presenceFirstWait bounds how long Run waits for the first attempt to
	// become present before it starts its workers.
	presenceFirstWait = 10 * time.Second
)

// holdPresence makes this replica present for as long as it runs, when the
// store can tell presence, and returns the function that ends it. It waits
// for the first attempt (up to presenceFirstWait), so that the replica's
// first passes run present: others would take their leases over otherwise.
func (r *Reconciler) holdPresence(ctx context.Context) (stop func()) {
	p, ok := r.store.(store.Presence)
	if !ok || r.cfg.SingleReplica {
		return func() {}
	}
	// Not ctx: presence ends after the workers, once Run's deferred stop
	// runs, so that passes finishing at shutdown keep their leases.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	first := make(chan struct{})
	var once sync.Once
	tried := func() { once.Do(func() { close(first) }) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer tried()
		if err := p.HoldPresence(pctx, r.cfg.Replica, r.presenceChanged(tried)); err != nil {
			r.log.Warn("replica presence: cannot hold it; other replicas take this replica's leases only when they expire", "err", err)
		}
	}()
	select {
	case <-first:
	case <-ctx.Done():
	case <-time.After(presenceFirstWait):
	}
	return func() {
		cancel()
		<-done
		r.presentSince.Store(0)
	}
}

// presenceChanged returns the held callback of HoldPresence: it records
// the replica's presence, logs its changes, and calls tried after the first
// attempt.
func (r *Reconciler) presenceChanged(tried func()) func(present bool, cause error) {
	was, attempted := false, false
	return func(present bool, cause error) {
		switch {
		case present && !was:
			r.presentSince.Store(time.Now().UnixNano())
			if attempted {
				r.log.Info("replica presence held again", "replica", r.cfg.Replica)
			}
		case !present && was:
			r.presentSince.Store(0)
			if cause != nil {
				r.log.Warn("replica presence lost; other replicas may take this replica's leases over until it is back (its passes then stop at their next lease check)",
					"replica", r.cfg.Replica, "err", cause)
			}
		case !present && !attempted && cause != nil:
			r.log.Warn("replica presence: first attempt failed; trying again", "replica", r.cfg.Replica, "err", cause)
		}
		was, attempted = present, true
		tried()
	}
}

// takeOver is called when the lease of a pass over sandbox id was found
// held (held: AcquireLease's error). When the holder is known not to be
// present it takes the lease over and returns it; otherwise ok is false
// and the pass waits for the holder as before. Each call costs one read of
// the holder's presence, as often as a pass finds a lease held (once a
// second per sandbox another replica drives, against the write of the
// acquisition that found it held).
func (r *Reconciler) takeOver(ctx context.Context, id string, held error) (l store.Lease, ok bool) {
	p, can := r.store.(store.Presence)
	var h *store.LeaseHeldError
	if !can || r.cfg.SingleReplica || !errors.As(held, &h) || !r.settled() {
		return store.Lease{}, false
	}
	present, err := p.ReplicaPresent(ctx, h.Holder)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Debug("cannot tell whether a lease's holder is present; waiting for its lease", "sandbox", id, "holder", h.Holder, "err", err)
		}
		return store.Lease{}, false
	}
	if present {
		return store.Lease{}, false
	}
	l, err = r.store.TakeOverLease(ctx, h.Name, h.Holder, r.cfg.Replica, r.cfg.LeaseTTL)
	if err != nil {
		// ErrConflict: released, or taken by another replica first.
		r.log.Debug("take over the lease of a replica that is gone", "sandbox", id, "holder", h.Holder, "err", err)
		return store.Lease{}, false
	}
	r.log.Info("took over the lease of a replica that is gone", "sandbox", id, "from", h.Holder,
		"its_lease_would_expire_in", time.Until(h.Expires).Round(time.Millisecond), "token", l.Token)
	return l, true
}

// settled reports whether this replica has been present for presenceSettle.
func (r *Reconciler) settled() bool {
	since := r.presentSince.Load()
	return since != 0 && time.Since(time.Unix(0, since)) >= presenceSettle
}
