package credentials

import (
	"sync"
	"time"
)

// maxBuckets bounds the limiter's memory; past it, buckets that have
// refilled completely (and so carry no state) are dropped.
const maxBuckets = 100_000

// limiter holds one token bucket per credential id, in memory: a restart
// refills every bucket. A bucket holds up to perMinute tokens and refills at
// perMinute per minute, so a credential allows a burst of its whole minute's
// budget and then a steady rate.
type limiter struct {
	mu      sync.Mutex // guards buckets
	buckets map[string]*bucket
}

type bucket struct {
	perMinute int
	tokens    float64
	last      time.Time
}

// allow takes one token from id's bucket at now and reports whether there
// was one. perMinute <= 0 always allows. A changed limit restarts the bucket
// full at its new size.
func (l *limiter) allow(id string, perMinute int, now time.Time) bool {
	if perMinute <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = make(map[string]*bucket)
	}
	b, ok := l.buckets[id]
	if !ok || b.perMinute != perMinute {
		if !ok && len(l.buckets) >= maxBuckets {
			l.pruneLocked(now)
		}
		b = &bucket{perMinute: perMinute, tokens: float64(perMinute), last: now}
		l.buckets[id] = b
	}
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// refill adds the tokens earned since last. A clock that goes backwards
// earns nothing.
func (b *bucket) refill(now time.Time) {
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(float64(b.perMinute), b.tokens+elapsed.Minutes()*float64(b.perMinute))
		b.last = now
	}
}

// pruneLocked drops the buckets that are full at now: forgetting them
// changes nothing.
func (l *limiter) pruneLocked(now time.Time) {
	for id, b := range l.buckets {
		b.refill(now)
		if b.tokens >= float64(b.perMinute) {
			delete(l.buckets, id)
		}
	}
}
