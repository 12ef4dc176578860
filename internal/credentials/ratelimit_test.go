package credentials

import (
	"testing"
	"time"
)

func TestLimiterNewLimitRestartsFull(t *testing.T) {
	var l limiter
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 2 {
		if !l.allow("c", 2, now) {
			t.Fatalf("use %d of a burst of 2 refused", i+1)
		}
	}
	if l.allow("c", 2, now) {
		t.Fatal("third use of a burst of 2 allowed")
	}
	if !l.allow("c", 5, now) {
		t.Fatal("a raised limit did not restart the bucket full")
	}
}

func TestLimiterPruneKeepsSpentBuckets(t *testing.T) {
	var l limiter
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l.allow("spent", 1, now)
	l.allow("full", 10, now.Add(-time.Hour))
	l.mu.Lock()
	l.pruneLocked(now)
	_, spent := l.buckets["spent"]
	_, full := l.buckets["full"]
	l.mu.Unlock()
	if !spent || full {
		t.Errorf("after prune: spent kept %v (want true), full kept %v (want false)", spent, full)
	}
	if l.allow("spent", 1, now) {
		t.Error("pruning refilled a spent bucket")
	}
}
