package credentials

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
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
	*rate.Limiter
}

// allow takes one token from id's bucket at now and reports whether there
// was one. perMinute <= 0 always allows. A changed limit restarts the bucket
// full at its new size. A clock that goes backwards earns nothing.
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
		b = &bucket{perMinute, rate.NewLimiter(rate.Limit(float64(perMinute)/60), perMinute)}
		l.buckets[id] = b
	}
	return b.AllowN(now, 1)
}

// pruneLocked drops the buckets that are full at now: forgetting them
// changes nothing.
func (l *limiter) pruneLocked(now time.Time) {
	for id, b := range l.buckets {
		if b.TokensAt(now) >= float64(b.perMinute) {
			delete(l.buckets, id)
		}
	}
}
