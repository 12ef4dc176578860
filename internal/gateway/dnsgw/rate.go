package dnsgw

import (
	"time"

	"golang.org/x/time/rate"
)

// tokenBucket is a token bucket over an injected clock: it holds at most
// burst tokens, gains rate tokens a second, and each allowed event takes
// one.
type tokenBucket struct {
	lim *rate.Limiter
	now func() time.Time
}

func newTokenBucket(r float64, burst int, now func() time.Time) *tokenBucket {
	return &tokenBucket{lim: rate.NewLimiter(rate.Limit(r), burst), now: now}
}

// allow takes a token if one is available and reports whether it did.
func (b *tokenBucket) allow() bool { return b.lim.AllowN(b.now(), 1) }
