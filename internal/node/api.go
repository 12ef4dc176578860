package node

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/api/node/v1/nodeapi/nodeapiv1connect"
	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/bridge"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/connecterr"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/unixsock"
)

// maxAPIBody bounds the requests the node-api reads.
const maxAPIBody = 1 << 20

// Handler returns the node-api HTTP handler: the Connect services of
// api/node/v1 (service_*.go), and plain HTTP for the byte streams (the
// guest proxy, a port's HTTP proxy, the TCP upgrade) and the metrics.
// Every route needs the node token.
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	opts := []connect.HandlerOption{
		connect.WithInterceptors(connecterr.Interceptor()),
		connect.WithReadMaxBytes(maxAPIBody),
	}
	mux.Handle(nodeapiv1connect.NewNodeServiceHandler(nodeService{m}, opts...))
	mux.Handle(nodeapiv1connect.NewExecutionServiceHandler(executionService{m}, opts...))
	mux.Handle(nodeapiv1connect.NewSnapshotServiceHandler(snapshotService{m}, opts...))
	mux.Handle(nodeapiv1connect.NewTemplateServiceHandler(templateService{m}, opts...))
	mux.HandleFunc("GET /node/v1/metrics", m.handleMetrics)
	mux.HandleFunc("/node/v1/executions/{exec}/guest/{rest...}", m.handleGuest)
	mux.HandleFunc("/node/v1/executions/{exec}/ports/{port}/{rest...}", m.handlePort)
	mux.HandleFunc("GET /node/v1/executions/{exec}/tcp/{port}", m.handlePortTCP)
	return m.authenticate(mux)
}

// connectErrors writes the errors of the Connect routes as Connect errors.
var connectErrors = connect.NewErrorWriter()

// authenticate refuses a request without the node token: on the Connect
// routes with a Connect error, elsewhere with the JSON error body.
func (m *Manager) authenticate(next http.Handler) http.Handler {
	want := []byte(m.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(nodev1.VersionHeader, nodev1.Version)
		got := []byte(r.Header.Get(TokenHeader))
		if m.cfg.Token == "" || subtle.ConstantTimeCompare(got, want) != 1 {
			err := fmt.Errorf("%w: node %s: node token required (%s): the control plane sends the one the node's heartbeat gave it", errdefs.ErrUnauthenticated, m.cfg.NodeID, TokenHeader)
			if connectErrors.IsSupported(r) {
				_ = connectErrors.Write(w, r, connecterr.Encode(err))
				return
			}
			writeError(w, err)
			return
		}
		// The token is for this hop only; never forward it to the guest.
		r.Header.Del(TokenHeader)
		next.ServeHTTP(w, r)
	})
}

// handleGuest forwards a public guest route to the execution's host bridge.
func (m *Manager) handleGuest(w http.ResponseWriter, r *http.Request) {
	execID := r.PathValue("exec")
	path := "/" + r.PathValue("rest")
	if !bridge.IsPublicGuestPath(path) {
		writeError(w, fmt.Errorf("%w: no guest route %s", errdefs.ErrNotFound, path))
		return
	}
	if err := validSandboxExecID(execID); err != nil {
		writeError(w, err)
		return
	}
	rec, err := m.records.loadShared(execID)
	if err != nil {
		writeError(w, fmt.Errorf("%w: exec %s is not on this node", errdefs.ErrNotFound, execID))
		return
	}
	if err := m.checkCapability(r.Header.Get(capability.Header), rec, bridge.GuestOp(path), m.now()); err != nil {
		writeError(w, err)
		return
	}
	if rec.Fenced {
		writeError(w, fmt.Errorf("%w: exec %s is frozen: node %s lost touch with the control plane; retry once it is back", errdefs.ErrUnavailable, execID, m.cfg.NodeID))
		return
	}
	// The capability goes on to the host bridge, which admits the request
	// again against its own installed identity and strips it: the guest
	// never sees it.
	// The request holds a lease on the execution: retiring or stopping it
	// cuts the request (a stream stops at once).
	leaseCtx, release, err := m.streams.acquire(r.Context(), surfaceGuest, execID)
	if err != nil {
		writeError(w, err)
		return
	}
	defer release()
	r = r.WithContext(leaseCtx)
	bc, err := m.bridge(rec)
	if err != nil {
		writeError(w, err)
		return
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", "bridge", "bridge"
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			if pr.Out.Body != nil && pr.Out.Body != http.NoBody {
				pr.Out.Body = bridge.LargeCopyBody(pr.Out.Body)
			}
		},
		Transport:     bc.transport,
		FlushInterval: -1,
		BufferPool:    bridge.ProxyBuffers,
		ErrorLog:      slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			m.log.Warn("forward to host bridge failed", "exec", execID, "path", path, "err", err)
			writeError(w, fmt.Errorf("%w: exec %s: host bridge: %v", errdefs.ErrUnavailable, execID, err))
		},
	}
	// The guest may answer (and the proxy flush headers) before the request
	// body has been forwarded; HTTP/1 would then cut the body off mid-stream.
	_ = http.NewResponseController(w).EnableFullDuplex()
	proxy.ServeHTTP(w, r)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers err with the status, code and reason of its class and
// reason.
func writeError(w http.ResponseWriter, err error) {
	status, code, reason := apierr.Encode(apierr.Node, err)
	writeJSON(w, status, nodev1.Error{Code: code, Message: err.Error(), Reason: string(reason)})
}

// StatusOf maps an error to the node-api's HTTP status and API error code:
// the table's node column (internal/apierr), where a refresh-route refusal
// is 409 and a clock refusal 503 clock_disagrees.
func StatusOf(err error) (int, string) {
	status, code, _ := apierr.Encode(apierr.Node, err)
	return status, code
}

// Serve serves the node-api on addr ("unix:PATH" or "HOST:PORT") until ctx is done.
func (m *Manager) Serve(ctx context.Context, addr string) error {
	var ln net.Listener
	var err error
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		_ = os.MkdirAll(filepath.Dir(path), 0o700)
		_ = os.Remove(path)
		ln, err = unixsock.Listen(path)
		if err == nil {
			err = os.Chmod(path, 0o600)
		}
	} else {
		ln, err = net.Listen("tcp", addr)
	}
	if err != nil {
		return fmt.Errorf("node-api: listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second}
	m.FinishInterruptedStarts(ctx)
	m.servingOnce.Do(func() { close(m.serving) })
	go m.ReattachGateways(ctx)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	m.log.Info("node-api listening", "addr", addr, "node", m.cfg.NodeID, "cpus", runtime.NumCPU())
	if err := srv.Serve(bridge.BufferedListener{Listener: ln}); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// TokenHeader carries the node token on control plane to node requests. It is
// not Authorization, which belongs to the guest protocol (E2B's Basic user).
const TokenHeader = "X-Space-Node-Token"
