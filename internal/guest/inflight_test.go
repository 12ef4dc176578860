package guest_test

import (
	"context"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/spacesandbox/space/internal/guest"
)

// unreadStreams is how many answers TestInFlightBytesBounded leaves
// unread: each could hold a stream's whole window on the host.
const unreadStreams = 64

// socketSlack is what the two ends' socket buffers hold besides the
// window (SetSocketBuffers makes them a few MiB at most).
const socketSlack = 8 << 20

// TestInFlightBytesBounded (catalogue ): a guest answering many
// streams with endless bodies that nobody on the host reads gets to send
// no more than the channel's window, guest.MaxInFlightBytes, over all of
// them — not a stream's window times the streams (with the HTTP/2
// client's defaults, 4 MiB × 64 = 256 MiB here) — and the host's heap
// grows by no more.
func TestInFlightBytesBounded(t *testing.T) {
	peer, conn := socketPair(t)
	var written atomic.Int64
	var started sync.WaitGroup
	started.Add(unreadStreams)
	srv := &http2.Server{MaxConcurrentStreams: unreadStreams * 2}
	chunk := make([]byte, 32<<10)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Done()
		w.WriteHeader(http.StatusOK)
		for r.Context().Err() == nil {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	})
	go srv.ServeConn(peer, &http2.ServeConnOpts{Handler: handler})
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer c.Close()

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < unreadStreams; i++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, guest.BaseURL+"/files", nil)
		resp, err := c.HTTPClient().Do(req)
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		defer resp.Body.Close() // never read
	}
	started.Wait()
	// The guest writes until the windows are full; then its writes block.
	var last int64 = -1
	for i := 0; i < 100 && written.Load() != last; i++ {
		last = written.Load()
		time.Sleep(100 * time.Millisecond)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	got := written.Load()
	t.Logf("the guest wrote %d MiB into %d unread streams; host heap +%d MiB", got>>20, unreadStreams, (int64(after.HeapInuse)-int64(before.HeapInuse))>>20)
	if got > guest.MaxInFlightBytes+socketSlack {
		t.Errorf("the guest wrote %d MiB into %d streams nobody read, want at most the channel's window %d MiB (+%d MiB of socket buffers)",
			got>>20, unreadStreams, guest.MaxInFlightBytes>>20, socketSlack>>20)
	}
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > guest.MaxInFlightBytes+socketSlack {
		t.Errorf("the host's heap grew by %d MiB holding unread answers, want at most %d MiB", grown>>20, (guest.MaxInFlightBytes+socketSlack)>>20)
	}
}
