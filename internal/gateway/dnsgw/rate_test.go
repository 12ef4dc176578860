package dnsgw

import (
	"testing"
	"time"
)

// fakeClock is a settable clock for tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func TestTokenBucket(t *testing.T) {
	clk := newFakeClock()
	b := newTokenBucket(2, 3, clk.now)
	for i := range 3 {
		if !b.allow() {
			t.Fatalf("event %d within the burst was refused", i)
		}
	}
	if b.allow() {
		t.Fatal("event past the burst was allowed")
	}
	clk.advance(400 * time.Millisecond) // 0.8 tokens
	if b.allow() {
		t.Fatal("allowed with less than one token")
	}
	clk.advance(100 * time.Millisecond) // 1.0 token
	if !b.allow() {
		t.Fatal("refused with one token")
	}
	clk.advance(time.Hour)
	n := 0
	for b.allow() {
		n++
	}
	if n != 3 {
		t.Fatalf("after a long pause got %d tokens, want the burst 3", n)
	}
	clk.advance(-time.Hour) // clock goes back: no refill, no panic
	if b.allow() {
		t.Fatal("clock going back created tokens")
	}
	// time.Now's monotonic reading never goes back; an injected clock that
	// does earns again once it passes the last event.
	clk.advance(time.Hour + time.Second)
	if !b.allow() {
		t.Fatal("no refill after the clock went back and forward again")
	}
}
