package metrics

import (
	"fmt"
	"io"
	"sync"
)

// DefaultBuckets are the upper bounds, in seconds, of a latency histogram
// of SPACE's request paths: 5 ms to 30 s.
var DefaultBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// Histogram counts observations in cumulative buckets, with their sum and
// count. It is safe for concurrent use.
type Histogram struct {
	name, help string
	bounds     []float64

	mu     sync.Mutex // guards counts, sum and n
	counts []uint64   // counts[i]: observations <= bounds[i]
	sum    float64
	n      uint64
}

// NewHistogram returns a histogram with the given ascending bucket bounds
// (DefaultBuckets when nil).
func NewHistogram(name, help string, bounds []float64) *Histogram {
	if bounds == nil {
		bounds = DefaultBuckets
	}
	return &Histogram{name: name, help: help, bounds: bounds, counts: make([]uint64, len(bounds))}
}

// Observe adds one observation.
func (h *Histogram) Observe(v float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, b := range h.bounds {
		if v <= b {
			h.counts[i]++
		}
	}
	h.sum += v
	h.n++
}

// Write writes the histogram.
func (h *Histogram) Write(w io.Writer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	writeHeader(w, h.name, h.help, "histogram")
	for i, le := range h.bounds {
		fmt.Fprintf(w, "%s_bucket{le=\"%g\"} %d\n", h.name, le, h.counts[i])
	}
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", h.name, h.n, h.name, h.sum, h.name, h.n)
}
