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

// DefaultMaxTenantStreams is how many long-lived operations one tenant may
// have open at the API at once across all its sandboxes
// (Config.MaxTenantStreams, space server --max-tenant-streams): the streams
// DefaultMaxSandboxStreams counts plus TCP port tunnels and HTTP requests to
// exposed ports through the API. It
// is four sandboxes at their own cap: without it a tenant holding many
// sandboxes holds 256 streams on each, and a client of one tenant could
// take the server's fd table (each stream holds a client connection and a
// connection to the node) from every other tenant.
//
// The cap is per tenant, not per API key: a tenant mints keys itself
// (POST /v1/keys), so a per-key cap is one more key away, and the E2B data
// plane and public port tunnels carry no API key at all, only the
// sandbox, whose tenant is known.
const DefaultMaxTenantStreams = 1024

// Surfaces that open streams: the label of the stream metrics.
const (
	surfaceREST = "rest"
	surfaceE2B  = "e2b"
	surfaceTCP  = "tcp" // TCP port tunnels through the API (ingress)
	// HTTP requests to exposed ports through the API (ingress: the port
	// URL, the path form, the E2B data plane's ports other than envd's),
	// an upgraded WebSocket included.
	surfacePortHTTP = "port_http"
)

var streamSurfaces = []string{surfaceREST, surfaceE2B, surfaceTCP, surfacePortHTTP}

// streamLimiter counts the open streams of each sandbox and of each tenant
// and refuses one past either cap: a client opening 10,000 watches on one
// sandbox gets 256 and 9,744 answers 429 too_many_streams; spread over its
// tenant's sandboxes it gets DefaultMaxTenantStreams in all. Other
// sandboxes and tenants are not touched. The counts are the control
// plane's process only (each server replica holds its own caps).
type streamLimiter struct {
	max, maxTenant int
	mu             sync.Mutex
	open           map[string]int // sandbox id -> open streams
	tenant         map[string]int // tenant id -> open streams
	total          map[string]int // surface -> open streams
	refused        *prom.CounterVec
	refusedTenant  *prom.CounterVec
}

func newStreamLimiter(max, maxTenant int) *streamLimiter {
	if max <= 0 {
		max = DefaultMaxSandboxStreams
	}
	if maxTenant <= 0 {
		maxTenant = DefaultMaxTenantStreams
	}
	return &streamLimiter{
		max: max, maxTenant: maxTenant, open: map[string]int{}, tenant: map[string]int{}, total: map[string]int{},
		refused: prom.NewCounterVec("space_sandbox_streams_refused_total",
			"Guest streams (exec sessions, watches, transfers, E2B envd requests) refused because their sandbox had as many open as it may, by API surface.",
			"surface").Always(streamSurfaces...),
		refusedTenant: prom.NewCounterVec("space_tenant_streams_refused_total",
			"Streams (exec sessions, watches, transfers, E2B envd requests, TCP port tunnels, HTTP port requests) refused because their tenant had as many open across its sandboxes as it may, by API surface.",
			"surface").Always(streamSurfaces...),
	}
}

// acquire takes one of sandbox id's stream slots, and one of its tenant's,
// for a stream of surface; the stream calls release (once; more calls do
// nothing) when it ends. Over either cap it is refused with
// errdefs.ErrTooManyStreams and a message naming the cap. A surface that
// has no per-sandbox cap of its own here (TCP tunnels: the node caps them
// per execution) passes an empty id.
func (l *streamLimiter) acquire(surface, tenant, id string) (release func(), err error) {
	l.mu.Lock()
	if id != "" && l.open[id] >= l.max {
		l.mu.Unlock()
		l.refused.Inc(surface)
		return nil, fmt.Errorf("%w: sandbox %s has %d streams open (exec sessions, watches, file transfers), the most it may; close one or wait for one to end",
			errdefs.ErrTooManyStreams, id, l.max)
	}
	if l.tenant[tenant] >= l.maxTenant {
		l.mu.Unlock()
		l.refusedTenant.Inc(surface)
		return nil, fmt.Errorf("%w: tenant %s has %d streams open across its sandboxes (exec sessions, watches, file transfers, port tunnels and requests), the most one tenant may; close some or wait for them to end (the server's --max-tenant-streams)",
			errdefs.ErrTooManyStreams, tenant, l.maxTenant)
	}
	if id != "" {
		l.open[id]++
	}
	l.tenant[tenant]++
	l.total[surface]++
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total[surface]--
			if id != "" {
				if l.open[id]--; l.open[id] <= 0 {
					delete(l.open, id)
				}
			}
			if l.tenant[tenant]--; l.tenant[tenant] <= 0 {
				delete(l.tenant, tenant)
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

// tenantCount is how many streams tenant has open.
func (l *streamLimiter) tenantCount(tenant string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tenant[tenant]
}

// write writes the refusal counters and the open-stream gauge.
func (l *streamLimiter) write(w io.Writer) {
	l.refused.Write(w)
	l.refusedTenant.Write(w)
	l.mu.Lock()
	open := make(map[string]int, len(streamSurfaces))
	for _, s := range streamSurfaces {
		open[s] = l.total[s]
	}
	l.mu.Unlock()
	prom.WriteGaugeVec(w, "space_sandbox_streams_open",
		"Streams open at the API, all sandboxes together, by API surface (each sandbox may hold at most the server's per-sandbox stream cap, each tenant its per-tenant cap).",
		"surface", open)
}
