package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
)

// handlePort serves /node/v1/executions/{exec}/ports/{port}/{rest...}:
// HTTP traffic to a port the guest listens on (ServicePort ingress). The
// request must carry a capability for this execution naming OpServicePort,
// this port and protocol "http"; the connection into the guest goes through
// the execution's gateway (its own link), never through the host's network.
func (m *Manager) handlePort(w http.ResponseWriter, r *http.Request) {
	execID, port, g, err := m.admitPort(r, "http")
	if err != nil {
		writeError(w, err)
		return
	}
	// Ingress holds a lease like every stream: a replaced or stopped
	// execution cuts it.
	leaseCtx, release, err := m.streams.acquire(r.Context(), surfacePortHTTP, execID)
	if err != nil {
		writeError(w, err)
		return
	}
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
				return g.gw.DialGuest(ctx, port)
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

// admitPort checks a ServicePort request for protocol: the execution and
// port in its path, the capability it carries (this execution, OpServicePort,
// this port and protocol), and that the execution has a gateway here.
func (m *Manager) admitPort(r *http.Request, protocol string) (string, uint16, *execGateway, error) {
	execID := r.PathValue("exec")
	if err := validSandboxExecID(execID); err != nil {
		return "", 0, nil, err
	}
	port, err := strconv.ParseUint(r.PathValue("port"), 10, 16)
	if err != nil || port == 0 {
		return "", 0, nil, fmt.Errorf("%w: port %q: want 1-65535", errdefs.ErrInvalidArgument, r.PathValue("port"))
	}
	rec, err := m.records.load(execID)
	if err != nil {
		return "", 0, nil, fmt.Errorf("%w: exec %s is not on this node", errdefs.ErrNotFound, execID)
	}
	req := capability.Request{Op: capability.OpServicePort, Port: uint16(port), Protocol: protocol}
	if err := m.checkCapabilityFor(r.Header.Get(capability.Header), rec, req, m.now()); err != nil {
		return "", 0, nil, err
	}
	m.gateways.mu.Lock()
	g := m.gateways.byExec[execID]
	m.gateways.mu.Unlock()
	if g == nil {
		return "", 0, nil, fmt.Errorf("%w: exec %s has no network on this node", errdefs.ErrFailedPrecondition, execID)
	}
	return execID, uint16(port), g, nil
}

// TCPUpgrade is the Upgrade token of a raw TCP tunnel to a guest port.
const TCPUpgrade = "space-tcp"

// handlePortTCP serves GET /node/v1/executions/{exec}/tcp/{port} with
// "Connection: Upgrade" and "Upgrade: space-tcp": after a 101 answer the
// connection carries the bytes of one TCP connection to the guest port,
// both ways. The capability must name OpServicePort, the port and "tcp".
func (m *Manager) handlePortTCP(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), TCPUpgrade) {
		writeError(w, fmt.Errorf("%w: a TCP tunnel needs \"Upgrade: %s\"", errdefs.ErrInvalidArgument, TCPUpgrade))
		return
	}
	execID, port, g, err := m.admitPort(r, "tcp")
	if err != nil {
		writeError(w, err)
		return
	}
	leaseCtx, release, err := m.streams.acquire(context.WithoutCancel(r.Context()), surfacePortTCP, execID)
	if err != nil {
		writeError(w, err)
		return
	}
	defer release()
	dctx, cancel := context.WithTimeout(leaseCtx, 30*time.Second)
	guestConn, err := g.gw.DialGuest(dctx, port)
	cancel()
	if err != nil {
		writeError(w, fmt.Errorf("%w: sandbox port %d: %v", errdefs.ErrUnavailable, port, err))
		return
	}
	defer guestConn.Close()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, fmt.Errorf("%w: cannot take over the connection: %v", errdefs.ErrUnavailable, err))
		return
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+TCPUpgrade+"\r\n\r\n")
	// Whatever the client sent after its request head is the tunnel's.
	var client io.Reader = conn
	if n := brw.Reader.Buffered(); n > 0 {
		head, _ := brw.Reader.Peek(n)
		client = io.MultiReader(bytes.NewReader(append([]byte(nil), head...)), conn)
	}
	stop := context.AfterFunc(leaseCtx, func() { conn.Close(); guestConn.Close() })
	defer stop()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(guestConn, client)
		if cw, ok := guestConn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(conn, guestConn)
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}
