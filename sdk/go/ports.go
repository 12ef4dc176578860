package space

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// ListPorts lists a sandbox's exposed ports with their URLs (never their
// tokens).
func (c *Client) ListPorts(ctx context.Context, id string) ([]sandboxv1.ServicePort, error) {
	p, err := sandboxPath(id, "/ports")
	if err != nil {
		return nil, fmt.Errorf("list ports: %w", err)
	}
	var list sandboxv1.ServicePortList
	if err := c.call(ctx, request{method: http.MethodGet, path: p}, nil, &list, maxJSONBody); err != nil {
		return nil, fmt.Errorf("list ports of sandbox %s: %w", id, err)
	}
	return list.Ports, nil
}

// UnexposePort stops exposing a sandbox port: its URLs answer 404 and its
// token is void.
func (c *Client) UnexposePort(ctx context.Context, id string, port int) error {
	p, err := sandboxPath(id, "/ports/"+strconv.Itoa(port))
	if err != nil {
		return fmt.Errorf("unexpose port: %w", err)
	}
	if err := c.call(ctx, request{method: http.MethodDelete, path: p}, nil, nil, 0); err != nil {
		return fmt.Errorf("unexpose port %d of sandbox %s: %w", port, id, err)
	}
	return nil
}

// tunnelHandshake bounds the server's answer to a tunnel request.
const tunnelHandshake = 2 * time.Minute

// DialPort opens a raw TCP connection to an exposed tcp port of a sandbox,
// through the server (GET /v1/sandboxes/{id}/ports/{port}/tcp, "Upgrade:
// space-tcp"), authenticated with the client's API key. The connection
// carries the bytes of one TCP connection to the guest port; CloseWrite
// half-closes it. A paused sandbox with an idle policy is woken first,
// which the handshake waits for.
//
// The tunnel is dialled directly (TCP, or TLS for an https server, with the
// TLS settings of the client's *http.Transport when it has one), not through
// the HTTP client: a half-close cannot pass through an HTTP client's
// upgraded body.
func (c *Client) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	p, err := sandboxPath(id, "/ports/"+strconv.Itoa(port)+"/tcp")
	if err != nil {
		return nil, fmt.Errorf("dial port: %w", err)
	}
	req, err := c.newRequest(ctx, request{method: http.MethodGet, path: p})
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", sandboxv1.TCPUpgrade)
	conn, err := c.dialServer(ctx, req.URL)
	if err != nil {
		return nil, fmt.Errorf("dial port %d of sandbox %s: %w", port, id, err)
	}
	tunnel, err := upgrade(ctx, conn, req)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("dial port %d of sandbox %s: %w", port, id, err)
	}
	return tunnel, nil
}

// dialServer opens a connection to u's host: TCP, or TLS for https.
func (c *Client) dialServer(ctx context.Context, u *url.URL) (net.Conn, error) {
	host := u.Host
	if u.Port() == "" {
		switch u.Scheme {
		case "https":
			host = net.JoinHostPort(u.Hostname(), "443")
		default:
			host = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	switch u.Scheme {
	case "http":
		var d net.Dialer
		return d.DialContext(ctx, "tcp", host)
	case "https":
		var cfg *tls.Config
		if tr, ok := c.hc.Transport.(*http.Transport); ok && tr.TLSClientConfig != nil {
			cfg = tr.TLSClientConfig.Clone()
		} else {
			cfg = &tls.Config{}
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		cfg.NextProtos = []string{"http/1.1"} // an upgrade needs HTTP/1.1
		d := tls.Dialer{Config: cfg}
		return d.DialContext(ctx, "tcp", host)
	}
	return nil, fmt.Errorf("server URL scheme %q: want http or https", u.Scheme)
}

// upgrade sends req on conn and returns the tunnel once the server has
// switched protocols, or the server's error.
func upgrade(ctx context.Context, conn net.Conn, req *http.Request) (net.Conn, error) {
	deadline := time.Now().Add(tunnelHandshake)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := req.Write(conn); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	if !strings.EqualFold(resp.Header.Get("Upgrade"), sandboxv1.TCPUpgrade) {
		return nil, fmt.Errorf("server switched to %q, want %s", resp.Header.Get("Upgrade"), sandboxv1.TCPUpgrade)
	}
	if !stop() {
		return nil, ctx.Err()
	}
	_ = conn.SetDeadline(time.Time{})
	return &tunnelConn{Conn: conn, r: br}, nil
}

// tunnelConn is a tunnel: what the server sent after its 101 answer first,
// then the connection.
type tunnelConn struct {
	net.Conn
	r *bufio.Reader
}

func (t *tunnelConn) Read(p []byte) (int, error) { return t.r.Read(p) }

// CloseWrite half-closes the tunnel: the guest port reads EOF, and the
// answer can still be read.
func (t *tunnelConn) CloseWrite() error {
	if cw, ok := t.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("connection %T cannot half-close", t.Conn)
}
