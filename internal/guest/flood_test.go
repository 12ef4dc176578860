package guest_test

import (
	"io"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/spacesandbox/space/internal/guest"
)

// TestControlFloodThrottled (catalogue A-3): a guest flooding its channel
// with PING frames, each of which the host must acknowledge, gets no more
// of them answered than guest.MaxAnsweredFramesPerSecond allows (plus one
// burst): the flood waits in the guest's socket, and the host spends on it
// a bounded amount of work a second instead of whatever the guest can
// write.
func TestControlFloodThrottled(t *testing.T) {
	peer, conn := socketPair(t)
	defer peer.Close()
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer c.Close()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(peer, preface); err != nil {
		t.Fatalf("client preface: %v", err)
	}
	fr := http2.NewFramer(peer, peer)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var acks atomic.Int64
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
				acks.Add(1)
			}
		}
	}()
	const flood = 2 * time.Second
	start := time.Now()
	peer.SetWriteDeadline(start.Add(flood))
	var sent int
	for ; ; sent++ {
		if err := fr.WritePing(false, [8]byte{byte(sent), byte(sent >> 8), byte(sent >> 16)}); err != nil {
			break
		}
	}
	elapsed := time.Since(start)
	time.Sleep(100 * time.Millisecond) // the last acks in flight
	got := acks.Load()
	limit := int64(guest.MaxAnsweredFramesPerSecond*elapsed.Seconds()) + guest.MaxAnsweredFramesPerSecond + 10
	t.Logf("the guest wrote %d PINGs in %v; the host answered %d", sent, elapsed.Round(time.Millisecond), got)
	if got > limit {
		t.Errorf("the host answered %d PINGs of a flood in %v, want at most %d (%d a second and a burst)", got, elapsed.Round(time.Millisecond), limit, guest.MaxAnsweredFramesPerSecond)
	}
	if got == 0 {
		t.Errorf("the host answered no PING at all")
	}
}
