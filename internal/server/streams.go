package server

import (
	"fmt"
	"io"
	"sync"

	"github.com/spacesandbox/space/internal/errdefs"
	prom "github.com/spacesandbox/space/internal/metrics"
)

// DefaultMaxSandboxStreams is how many long-lived guest operations one
// sandbox may have open at the API at once (Config.MaxSandboxStreams):
// exec sessions and runs, file watches and transfers, and every E2B envd
// request in flight. Each holds a goroutine, a client connection and a
// connection to the node; the host bridge's own cap (1,024 per execution,
// bridge.DefaultMaxStreams) is higher, so the control plane refuses first
// and clearly, before anything reaches the node.
const DefaultMaxSandboxStreams = 256

// Surfaces that open streams: the label of the stream metrics.
const (
	surfaceREST = "rest"
	surfaceE2B  = "e2b"
)

var streamSurfaces = []string{surfaceREST, surfaceE2B}

// streamLimiter counts the open streams of each sandbox and refuses one
// past the cap: a client opening 10,000 watches on one sandbox gets 256 and
// 9,744 answers 429 too_many_streams, and the other sandboxes' streams are
// not touched. The counts are the control plane's process only (each
// server replica holds its own cap).
type streamLimiter struct {
	max     int
	mu      sync.Mutex
	open    map[string]int // sandbox id -> open streams
	total   map[string]int // surface -> open streams
	refused *prom.CounterVec
}

func newStreamLimiter(max int) *streamLimiter {
	if max <= 0 {
		max = DefaultMaxSandboxStreams
	}
	return &streamLimiter{
		max: max, open: map[string]int{}, total: map[string]int{},
		refused: prom.NewCounterVec("space_sandbox_streams_refused_total",
			"Guest streams (exec sessions, watches, transfers, E2B envd requests) refused because their sandbox had as many open as it may, by API surface.",
			"surface").Always(streamSurfaces...),
	}
}

// acquire takes one of sandbox id's stream slots for a stream of surface;
// the stream calls release (once; more calls do nothing) when it ends. Over
// the cap it is refused with errdefs.ErrTooManyStreams.
func (l *streamLimiter) acquire(surface, id string) (release func(), err error) {
	l.mu.Lock()
	if l.open[id] >= l.max {
		l.mu.Unlock()
		l.refused.Inc(surface)
		return nil, fmt.Errorf("%w: sandbox %s has %d streams open (exec sessions, watches, file transfers), the most it may; close one or wait for one to end",
			errdefs.ErrTooManyStreams, id, l.max)
	}
	l.open[id]++
	l.total[surface]++
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total[surface]--
			if l.open[id]--; l.open[id] <= 0 {
				delete(l.open, id)
			}
		})
	}, nil
}

// openCount is how many streams sandbox id has open.
func (l *streamLimiter) openCount(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[id]
}

// write writes the refusal counter and the open-stream gauge.
func (l *streamLimiter) write(w io.Writer) {
	l.refused.Write(w)
	l.mu.Lock()
	open := make(map[string]int, len(streamSurfaces))
	for _, s := range streamSurfaces {
		open[s] = l.total[s]
	}
	l.mu.Unlock()
	prom.WriteGaugeVec(w, "space_sandbox_streams_open",
		"Guest streams open at the API, all sandboxes together, by API surface (each sandbox may hold at most the server's per-sandbox stream cap).",
		"surface", open)
}
