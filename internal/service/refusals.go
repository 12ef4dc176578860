package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// A lifecycle request the server refuses (a pause of a stopped sandbox, a
// start without a kept disk, a restore over quota) is an event of its
// sandbox, type "refused", its message the operation and the answer's code
// and message as the client was told them ("pause refused: conflict:
// …"), so the sandbox's timeline says what was asked and why it did not
// happen. A client looping a refused request must not grow the event log
// without bound, so the events are capped twice: per sandbox a token bucket
// of refusalBurst events refilled one per refusalEvery (a loop records
// refusalBurst, then one each refusalEvery), and refusalMax "refused"
// events over a sandbox's life (the last one says that later refusals are
// not recorded). A refusal past either cap is still answered, only not
// recorded. A request for a sandbox the caller cannot see records nothing.
const (
	refusalBurst = 5
	refusalEvery = 30 * time.Second
	refusalMax   = 100
	// refusalSandboxes bounds the buckets kept: past it, the full ones are
	// dropped, and while it is still reached new sandboxes record none.
	refusalSandboxes = 10000
)

// refusals is the per-sandbox token buckets of refused-request events.
type refusals struct {
	mu      sync.Mutex
	buckets map[string]*refusalBucket
}

type refusalBucket struct {
	tokens float64
	at     time.Time
}

// take reports whether sandbox id may record a refusal at now, taking a
// token when it may.
func (r *refusals) take(id string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.buckets == nil {
		r.buckets = map[string]*refusalBucket{}
	}
	b := r.buckets[id]
	if b == nil {
		if len(r.buckets) >= refusalSandboxes {
			for k, o := range r.buckets {
				if o.refill(now) >= refusalBurst {
					delete(r.buckets, k)
				}
			}
			if len(r.buckets) >= refusalSandboxes {
				return false
			}
		}
		b = &refusalBucket{tokens: refusalBurst, at: now}
		r.buckets[id] = b
	}
	if b.refill(now) < 1 {
		return false
	}
	b.tokens--
	return true
}

// refill adds the tokens earned since the bucket was last seen and returns
// how many it holds.
func (b *refusalBucket) refill(now time.Time) float64 {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(refusalBurst, b.tokens+d.Seconds()/refusalEvery.Seconds())
		b.at = now
	}
	return b.tokens
}

// refused records that op on sandbox id was refused with err, within the
// caps above. A sandbox gone (NotFound) or a request the client abandoned
// records nothing.
func (s *Sandboxes) refused(ctx context.Context, id string, op sandbox.Op, err error) {
	if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	if !s.refusals.take(id, time.Now()) {
		return
	}
	events, lerr := s.store.ListEvents(context.WithoutCancel(ctx), id)
	if lerr != nil {
		s.log.Warn("list events", "sandbox", id, "err", lerr)
		return
	}
	n := 0
	for _, e := range events {
		if e.Type == "refused" {
			n++
		}
	}
	if n >= refusalMax {
		return
	}
	msg := fmt.Sprintf("%s refused: %s", op, refusalText(err))
	if n == refusalMax-1 {
		msg += fmt.Sprintf(" (this sandbox's %d refused requests are recorded; later ones are not)", refusalMax)
	}
	s.Event(ctx, id, "refused", msg)
}

// refusalText is err as the REST API answers it: its code and message, at
// most maxRefusalText bytes of it (an internal error's message is not
// shown, as the answer does not show it).
func refusalText(err error) string {
	_, code, _ := apierr.Encode(apierr.ControlPlane, err)
	if code == sandboxv1.CodeInternal {
		return code + ": internal error; the server log has the details"
	}
	msg := err.Error()
	if len(msg) > maxRefusalText {
		msg = strings.ToValidUTF8(msg[:maxRefusalText], "") + "…"
	}
	return code + ": " + msg
}

// maxRefusalText bounds the message of a refused event.
const maxRefusalText = 512
