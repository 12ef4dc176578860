package dnsgw

import (
	"sync"
	"time"
)

// tokenBucket is a token bucket over an injected clock: it holds at most
// burst tokens, gains rate tokens a second, and each allowed event takes
// one.
type tokenBucket struct {
	rate  float64
	burst float64
	now   func() time.Time

	mu     sync.Mutex // guards tokens and last
	tokens float64
	last   time.Time
}

func newTokenBucket(rate float64, burst int, now func() time.Time) *tokenBucket {
	return &tokenBucket{rate: rate, burst: float64(burst), now: now, tokens: float64(burst), last: now()}
}

// allow takes a token if one is available and reports whether it did.
func (b *tokenBucket) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(b.burst, b.tokens+elapsed.Seconds()*b.rate)
		b.last = now
	} else if elapsed < 0 {
		b.last = now // the clock went back: refill from here, never take tokens away
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
