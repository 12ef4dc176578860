package server

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	prom "github.com/spacesandbox/space/internal/metrics"
	"github.com/spacesandbox/space/internal/store"
)

// metrics is the server's Prometheus exposition: request counters, latency
// histograms of the hot paths, and sandbox counts by state.
type metrics struct {
	requests *prom.CounterVec // by route and status code
	// refreshes counts RefreshRoute answers by outcome.
	refreshes    *prom.CounterVec
	create, exec *prom.Histogram
}

func newMetrics() *metrics {
	return &metrics{
		requests:  prom.NewCounterVec("space_http_requests_total", "API requests by route and status.", "route", "code"),
		refreshes: prom.NewCounterVec("space_route_refresh_total", "RefreshRoute answers from nodes, by outcome.", "outcome"),
		create:    prom.NewHistogram("space_sandbox_create_seconds", "", nil),
		exec:      prom.NewHistogram("space_exec_seconds", "", nil),
	}
}

func (m *metrics) observeCreate(d time.Duration) { m.create.Observe(d.Seconds()) }
func (m *metrics) observeExec(d time.Duration)   { m.exec.Observe(d.Seconds()) }

func (m *metrics) countRequest(route string, code int) {
	m.requests.Inc(route, strconv.Itoa(code))
}

// countRouteRefresh counts a RefreshRoute answer of a node by what came of
// it: received, retried, not_replayed, unresolved.
func (m *metrics) countRouteRefresh(outcome string) { m.refreshes.Inc(outcome) }

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
	s.streams.write(&b)
	s.e2bAPI.WriteMetrics(&b)
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if sbs, err := s.store.ListSandboxes(ctx, store.SandboxFilter{}); err == nil {
		byState := map[string]int{}
		for _, sb := range sbs {
			byState[string(sb.State)]++
		}
		prom.WriteGaugeVec(&b, "space_sandboxes", "Sandboxes by lifecycle state.", "state", byState)
	}
	w.Header().Set("Content-Type", prom.ContentType)
	_, _ = w.Write([]byte(b.String()))
}

func (m *metrics) write(w io.Writer) {
	m.requests.Write(w)
	m.refreshes.Write(w)
	m.exec.Write(w)
	m.create.Write(w)
}
