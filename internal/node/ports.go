package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"time"

	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/privop"
)

// handlePort serves /node/v1/executions/{exec}/ports/{port}/{rest...}:
// HTTP traffic to a port the guest listens on (ServicePort ingress). The
// request must carry a capability for this execution naming OpServicePort,
// this port and protocol "http"; the connection into the guest goes through
// the execution's gateway (its own link), never through the host's network.
func (m *Manager) handlePort(w http.ResponseWriter, r *http.Request) {
	execID := r.PathValue("exec")
	if err := privop.ValidExecID(execID); err != nil {
		writeError(w, err)
		return
	}
	port, err := strconv.ParseUint(r.PathValue("port"), 10, 16)
	if err != nil || port == 0 {
		writeError(w, fmt.Errorf("%w: port %q: want 1-65535", errdefs.ErrInvalidArgument, r.PathValue("port")))
		return
	}
	rec, err := m.records.load(execID)
	if err != nil {
		writeError(w, fmt.Errorf("%w: exec %s is not on this node", errdefs.ErrNotFound, execID))
		return
	}
	req := capability.Request{Op: capability.OpServicePort, Port: uint16(port), Protocol: "http"}
	if err := m.checkCapabilityFor(r.Header.Get(capability.Header), rec, req, time.Now()); err != nil {
		writeError(w, err)
		return
	}
	m.gateways.mu.Lock()
	g := m.gateways.byExec[execID]
	m.gateways.mu.Unlock()
	if g == nil {
		writeError(w, fmt.Errorf("%w: exec %s has no network on this node", errdefs.ErrFailedPrecondition, execID))
		return
	}
	// Ingress holds a lease like every stream: a replaced or stopped
	// execution cuts it.
	leaseCtx, release := m.streams.acquire(r.Context(), execID)
	defer release()
	r = r.WithContext(leaseCtx)
	path := "/" + r.PathValue("rest")
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", net.JoinHostPort("sandbox", strconv.Itoa(int(port)))
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			pr.Out.Host = pr.In.Host
			// The guest never sees the capability.
			pr.Out.Header.Del(capability.Header)
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return g.gw.DialGuest(ctx, uint16(port))
			},
			DisableKeepAlives:     true,
			ResponseHeaderTimeout: 5 * time.Minute,
		},
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, fmt.Errorf("%w: sandbox port %d: %v", errdefs.ErrUnavailable, port, err))
		},
	}
	_ = http.NewResponseController(w).EnableFullDuplex()
	proxy.ServeHTTP(w, r)
}
