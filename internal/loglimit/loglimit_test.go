package loglimit

import (
	"fmt"
	"testing"
	"time"
)

// TestLimiter: at most perSecond lines per key and second; the next line
// let through says how many were held back; keys are independent.
func TestLimiter(t *testing.T) {
	l := New(3)
	now := time.Unix(100, 0)
	for i := 0; i < 3; i++ {
		if _, ok := l.Allow("deny-signature", now); !ok {
			t.Fatalf("line %d refused within the limit", i)
		}
	}
	for i := 0; i < 5; i++ {
		if _, ok := l.Allow("deny-signature", now.Add(100*time.Millisecond)); ok {
			t.Fatalf("line over the limit let through")
		}
	}
	if _, ok := l.Allow("deny-sandbox", now); !ok {
		t.Error("another key was limited by the first")
	}
	suppressed, ok := l.Allow("deny-signature", now.Add(time.Second))
	if !ok || suppressed != 5 {
		t.Errorf("next second: ok %v, suppressed %d; want true, 5", ok, suppressed)
	}
}

// TestLimiterBoundsKeys: a flood of distinct keys does not grow the map
// beyond maxKeys.
func TestLimiterBoundsKeys(t *testing.T) {
	l := New(1)
	now := time.Unix(100, 0)
	for i := 0; i < 3*maxKeys; i++ {
		l.Allow(fmt.Sprint("k", i), now)
	}
	if n := len(l.keys); n > maxKeys {
		t.Fatalf("%d keys remembered, at most %d", n, maxKeys)
	}
}
