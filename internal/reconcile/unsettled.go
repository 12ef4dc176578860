package reconcile

import (
	"context"
	"sync"

	"github.com/spacesandbox/space/internal/store"
)

// A pass starts by asking the store for the snapshots its sandbox still
// owes work to (pendingSnapshots: deleting and creating rows, two queries).
// Nearly always there are none, and the resync passes over every sandbox
// every Resync: for N idle sandboxes that is 2N queries a period for
// nothing. So the resync lists the unsettled snapshots of every sandbox in
// one query (store.Snapshots.ListUnsettledSnapshots) and leaves each
// sandbox it found none for a hint; the next pass over it takes the hint
// and skips the two queries.
//
// A hint is only as good as the listing, so whatever may have written one of
// the sandbox's snapshot rows since the listing began drops it (touch):
//
//   - Enqueue: every API handler that writes a snapshot row (a request, a
//     delete, a fork's) calls it after the write, and a pass over a hinted
//     sandbox can run only after the resync's listing ended;
//   - the end of every pass over the sandbox: a pass writes its own
//     sandbox's snapshot rows (the schedule, crash and lifecycle
//     snapshots), and may have done so while the listing ran.
//
// Touches while the listing runs are remembered (listing), so the resync
// sets no hint for a sandbox touched during it. A hint is used once: the
// next resync lists again. Another replica's writes are not seen here
// (they touch that replica's hints): its own pass, or this replica's next
// resync, which lists again, takes their rows — as before, one resync at
// most.
//
// The hint also carries the nodes as the resync listed them (one ListNodes),
// so that the idle path of a pass (drainStep's draining, checkRunning's and
// checkPaused's lostNode) does not read its node twice more. Only a "nothing
// to do" answer is taken from it — the node neither draining nor down —
// because a node enters those states only with an Enqueue of its
// sandboxes after the write (the drain handler, declareLostNodes), which
// drops their hints; any other answer is read from the store as before.
type snapshotHints struct {
	mu sync.Mutex // guards every field below
	// quiet holds the sandboxes the last listing found no unsettled
	// snapshot of and that nothing touched since it began, with what
	// that resync read of the nodes.
	quiet map[string]*resyncView
	// listing holds what was touched since the running listing began; nil
	// while none runs.
	listing map[string]bool
}

func newSnapshotHints() *snapshotHints {
	return &snapshotHints{quiet: map[string]*resyncView{}}
}

// begin is called before the listing is read.
func (h *snapshotHints) begin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listing = map[string]bool{}
}

// end is called after the listing was read: quiet are the sandboxes it found
// no unsettled snapshot of, view what the resync read of the nodes. The
// hints of earlier listings go (a sandbox gone since would keep its own
// forever); ok false (the listing failed) leaves none.
func (h *snapshotHints) end(quiet []string, view *resyncView, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	next := map[string]*resyncView{}
	if ok {
		for _, id := range quiet {
			if !h.listing[id] {
				next[id] = view
			}
		}
	}
	h.quiet, h.listing = next, nil
}

// touch drops sandbox id's hint: one of its snapshot rows may have been
// written.
func (h *snapshotHints) touch(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.quiet, id)
	if h.listing != nil {
		h.listing[id] = true
	}
}

// take returns sandbox id's hint (nil: none), and drops it.
func (h *snapshotHints) take(id string) *resyncView {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := h.quiet[id]
	delete(h.quiet, id)
	return v
}

// resyncView is what a resync read for the hints of its passes.
type resyncView struct {
	// nodes by id, as listed after the hints' listing began; nil: the
	// listing failed.
	nodes map[string]store.Node
}

type resyncViewKey struct{}

// withResyncView hands a pass its hint's view.
func withResyncView(ctx context.Context, v *resyncView) context.Context {
	return context.WithValue(ctx, resyncViewKey{}, v)
}

// viewedNode returns node id as the pass's hint listed it, if it has one.
func viewedNode(ctx context.Context, id string) (store.Node, bool) {
	v, _ := ctx.Value(resyncViewKey{}).(*resyncView)
	if v == nil {
		return store.Node{}, false
	}
	n, ok := v.nodes[id]
	return n, ok
}
