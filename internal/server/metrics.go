package server

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/store"
)

// metrics is a small Prometheus exposition: request counters, latency
// histograms of the hot paths, and sandbox counts by state.
type metrics struct {
	mu       sync.Mutex        // guards every map
	requests map[string]uint64 // "route\x00code" -> count
	hists    map[string]*histogram
	// refreshes counts RefreshRoute answers by outcome.
	refreshes map[string]uint64
}

func newMetrics() *metrics {
	return &metrics{requests: map[string]uint64{}, refreshes: map[string]uint64{}, hists: map[string]*histogram{
		"space_sandbox_create_seconds": newHistogram(),
		"space_exec_seconds":           newHistogram(),
	}}
}

var buckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

type histogram struct {
	counts []uint64
	sum    float64
	n      uint64
}

func newHistogram() *histogram { return &histogram{counts: make([]uint64, len(buckets))} }

func (m *metrics) observe(name string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.hists[name]
	v := d.Seconds()
	for i, b := range buckets {
		if v <= b {
			h.counts[i]++
		}
	}
	h.sum += v
	h.n++
}

func (m *metrics) observeCreate(d time.Duration) { m.observe("space_sandbox_create_seconds", d) }
func (m *metrics) observeExec(d time.Duration)   { m.observe("space_exec_seconds", d) }

func (m *metrics) countRequest(route string, code int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[fmt.Sprintf("%s\x00%d", route, code)]++
}

// countRouteRefresh counts a RefreshRoute answer of a node by what came of
// it: received, retried, not_replayed, unresolved.
func (m *metrics) countRouteRefresh(outcome string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refreshes[outcome]++
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController (and WebSocket hijacking) reach the
// underlying writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (s *Server) instrument(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.code == 0 {
			rec.code = http.StatusSwitchingProtocols
		}
		s.metrics.countRequest(route, rec.code)
	})
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	s.metrics.write(&b)
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if sbs, err := s.store.ListSandboxes(ctx, store.SandboxFilter{}); err == nil {
		byState := map[string]int{}
		for _, sb := range sbs {
			byState[string(sb.State)]++
		}
		b.WriteString("# HELP space_sandboxes Sandboxes by lifecycle state.\n# TYPE space_sandboxes gauge\n")
		for _, st := range sortedKeys(byState) {
			fmt.Fprintf(&b, "space_sandboxes{state=%q} %d\n", st, byState[st])
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write([]byte(b.String()))
}

func (m *metrics) write(b *strings.Builder) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b.WriteString("# HELP space_http_requests_total API requests by route and status.\n# TYPE space_http_requests_total counter\n")
	for _, k := range sortedKeys(m.requests) {
		route, code, _ := strings.Cut(k, "\x00")
		fmt.Fprintf(b, "space_http_requests_total{route=%q,code=%q} %d\n", route, code, m.requests[k])
	}
	b.WriteString("# HELP space_route_refresh_total RefreshRoute answers from nodes, by outcome.\n# TYPE space_route_refresh_total counter\n")
	for _, k := range sortedKeys(m.refreshes) {
		fmt.Fprintf(b, "space_route_refresh_total{outcome=%q} %d\n", k, m.refreshes[k])
	}
	for _, name := range sortedKeys(m.hists) {
		h := m.hists[name]
		fmt.Fprintf(b, "# TYPE %s histogram\n", name)
		for i, le := range buckets {
			fmt.Fprintf(b, "%s_bucket{le=\"%g\"} %d\n", name, le, h.counts[i])
		}
		fmt.Fprintf(b, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", name, h.n, name, h.sum, name, h.n)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
