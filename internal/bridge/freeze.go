package bridge

import (
	"context"
	"net/http"
	"time"

	"connectrpc.com/connect"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	"github.com/spacesandbox/space/internal/failpoint"
)

// FreezeLimit is the longest the guest's filesystem stays frozen: a freeze
// the manager does not undo in time is undone by the bridge.
const FreezeLimit = 30 * time.Second

// frozenPaths are the guest mount points a disk snapshot freezes: the root
// filesystem, which holds everything a sandbox writes to its disk.
var frozenPaths = []string{"/"}

// handleFreeze freezes the guest's root filesystem (FIFREEZE: dirty data is
// written and new writes wait) so that a copy of its disk taken now is
// consistent; the manager thaws it with POST /bridge/v1/thaw.
func (b *Bridge) handleFreeze(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	if _, err := b.client.Control().Freeze(ctx, connect.NewRequest(&controlv1.FreezeRequest{Paths: frozenPaths})); err != nil {
		status := http.StatusBadGateway
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			status = http.StatusConflict
		}
		writeJSONError(w, status, "guest freeze: "+err.Error())
		return
	}
	b.mu.Lock()
	if b.thawTimer != nil {
		b.thawTimer.Stop()
	}
	b.thawTimer = time.AfterFunc(FreezeLimit, func() {
		b.log.Warn("filesystem still frozen after the limit: thawing", "limit", FreezeLimit)
		_ = b.thaw(context.Background())
	})
	b.mu.Unlock()
	failpoint.BridgeAfterFreeze.Hit()
	w.WriteHeader(http.StatusNoContent)
}

func (b *Bridge) handleThaw(w http.ResponseWriter, r *http.Request) {
	if err := b.thaw(r.Context()); err != nil {
		writeJSONError(w, http.StatusBadGateway, "guest thaw: "+err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (b *Bridge) thaw(ctx context.Context) error {
	b.mu.Lock()
	if b.thawTimer != nil {
		b.thawTimer.Stop()
		b.thawTimer = nil
	}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := b.client.Control().Thaw(ctx, connect.NewRequest(&controlv1.ThawRequest{Paths: frozenPaths}))
	return err
}
