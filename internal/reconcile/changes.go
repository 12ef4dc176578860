package reconcile

import (
	"context"

	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"golang.org/x/sync/errgroup"
)

// Replicas sharing a store learn of each other's writes from the store's
// announcements (store.SandboxChanges: PostgreSQL's LISTEN/NOTIFY) instead of
// waiting for their next resync or their next pass. What an announcement of
// sandbox X does on this replica:
//
//   - it wakes every Watch of X here (notify): a request waiting for X to
//     settle re-reads it at once although another replica drives it. Cheap:
//     a map lookup, and one read per waiting request.
//   - it queues X again only if one of this replica's workers is in a pass
//     over X right now, holding X's lease: the change was made elsewhere
//     (or by the pass itself) after the pass read X, and the pass may end
//     without writing, so without seeing it. The queue runs X once more right
//     after the pass, instead of at the writer's next try a second later (it
//     found the lease held) or at the next resync.
//
// It does not queue X on replicas that are not working on it. Whoever
// writes a sandbox queues it locally already (the API handlers call
// Enqueue, a pass requeues what it changed), so that replica drives the
// change, or, when another holds the lease, the holder does as above. A pass
// on every other replica would find the lease held (and then poll it every
// second while the holder works) or find nothing to do: each costs a lease
// acquire and release (two writes) and reads, times the number of replicas,
// for every write of every sandbox, and buys no latency.
//
// The rerun a pass's own write causes (its announcement can arrive before
// the pass ends) costs up to one pass per writing pass. It terminates because
// passes are level-based: a pass over a settled sandbox finds nothing to do
// and writes nothing, so announces nothing. Measured with two replicas and
// no resync (BenchmarkCrossReplicaWake/notify-resync-1m): 1.9 passes per
// pause with this rule, 4.05 when every replica queues every announcement
// (and the waiter saw the pause in 12.5 ms median, against 22 ms).

// FollowChanges applies the store's announcements of sandbox changes until
// ctx is done, as described above. When announcements may have been lost (the
// store reconnected) it looks at every sandbox, as a resync does. It returns
// nil at once when the store announces nothing (SQLite: a single replica has
// nobody to hear from), and nil when ctx is done.
func (r *Reconciler) FollowChanges(ctx context.Context) error {
	src, ok := r.store.(store.SandboxChanges)
	if !ok {
		return nil
	}
	missed := make(chan struct{}, 1)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		// Looking at everything reads every sandbox: done here, not on the
		// store's goroutine, whose announcements would queue up behind it.
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-missed:
				r.requeueAll(ctx)
			}
		}
	})
	g.Go(func() error {
		err := src.WatchSandboxChanges(ctx, r.sandboxChanged, func(cause error) {
			if cause != nil {
				r.log.Info("sandbox change announcements resumed; looking at every sandbox", "interrupted_by", cause)
			}
			select {
			case missed <- struct{}{}:
			default:
			}
		})
		if err != nil && ctx.Err() == nil {
			// Not fatal: the resync still finds every change, later.
			r.log.Warn("sandbox change announcements stopped; other replicas' changes are seen at each resync only", "err", err)
		}
		return nil
	})
	return g.Wait()
}

// sandboxChanged is told that sandbox id changed somewhere.
func (r *Reconciler) sandboxChanged(id string) {
	r.notify(id)
	r.q.addIfProcessing(id)
}

// requeueAll queues the sandboxes a resync would and wakes every Watch.
// Unlike resync it neither stops orphans nor declares nodes lost: those
// follow the clock, not changes, and stay with Run's resync.
func (r *Reconciler) requeueAll(ctx context.Context) {
	sbs, err := r.store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("look at every sandbox after missed change announcements", "err", err)
		}
		return
	}
	for _, sb := range sbs {
		if sb.State != sandbox.StateFailed || r.holds(ctx, sb) {
			r.Enqueue(sb.ID)
		}
	}
	r.watchMu.Lock()
	ids := make([]string, 0, len(r.watchers))
	for id := range r.watchers {
		ids = append(ids, id)
	}
	r.watchMu.Unlock()
	for _, id := range ids {
		r.notify(id)
	}
}

// addIfProcessing marks key to be processed again when a worker is
// processing it now (as add would), and reports whether one is; a key not
// being processed is left alone.
func (q *queue) addIfProcessing(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown || !q.processing[key] {
		return false
	}
	q.dirty[key] = true // done queues it again
	return true
}
