package nodeclient

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
)

// TCPUpgrade is the Upgrade token of a node's raw TCP tunnel to a guest
// port; it matches node.TCPUpgrade.
const TCPUpgrade = "space-tcp"

// ErrRefreshRoute marks a node's refusal of a capability that names another
// incarnation of the sandbox: the caller may refresh its route and retry
// once. It is errdefs.ErrRefreshRoute, as every answer of the node with that
// reason decodes.
var ErrRefreshRoute = errdefs.ErrRefreshRoute

// tunnelHandshake bounds the node's answer to a tunnel request.
const tunnelHandshake = 30 * time.Second

// PortHTTP returns the HTTP client and base URL that reach HTTP port port of
// one execution on this node (ServicePort ingress): base+"/"+path is sent to
// the guest as /path. Requests need a capability for the port and "http".
func (c *Client) PortHTTP(execID string, port uint16) (*http.Client, string) {
	return c.stream, c.base + "/node/v1/executions/" + url.PathEscape(execID) + "/ports/" + strconv.Itoa(int(port))
}

// DialPortTCP opens a raw TCP tunnel to port of one execution on this node,
// carrying capabilityToken (Encode form; it must name the port and "tcp").
// The returned connection carries the bytes of one TCP connection to the
// guest port; CloseWrite half-closes it. A refusal is the node's error,
// matching ErrRefreshRoute when the capability names another incarnation.
func (c *Client) DialPortTCP(ctx context.Context, execID string, port uint16, capabilityToken string) (net.Conn, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: node tunnel to exec %s port %d: %v", errdefs.ErrUnavailable, execID, port, err)
	}
	tunnel, err := c.handshake(ctx, conn, execID, port, capabilityToken)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return tunnel, nil
}

func (c *Client) handshake(ctx context.Context, conn net.Conn, execID string, port uint16, capabilityToken string) (net.Conn, error) {
	deadline := time.Now().Add(tunnelHandshake)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	u := c.base + "/node/v1/executions/" + url.PathEscape(execID) + "/tcp/" + strconv.Itoa(int(port))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(TokenHeader, c.token)
	req.Header.Set(capability.Header, capabilityToken)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", TCPUpgrade)
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("%w: node tunnel to exec %s port %d: %v", errdefs.ErrUnavailable, execID, port, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("%w: node tunnel to exec %s port %d: %v", errdefs.ErrUnavailable, execID, port, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, tunnelRefusal(resp)
	}
	if !strings.EqualFold(resp.Header.Get("Upgrade"), TCPUpgrade) {
		return nil, fmt.Errorf("%w: node tunnel to exec %s port %d: node switched to %q", errdefs.ErrUnavailable, execID, port, resp.Header.Get("Upgrade"))
	}
	if stop() {
		_ = conn.SetDeadline(time.Time{})
	} else {
		return nil, ctx.Err()
	}
	return &tunnelConn{Conn: conn, r: br}, nil
}

// tunnelRefusal is the error of a node that did not switch protocols.
func tunnelRefusal(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e nodev1.Error
	if json.Unmarshal(b, &e) != nil || e.Message == "" {
		e.Message = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return &Error{Message: e.Message, cause: apierr.Decode(e.Code, errdefs.Reason(e.Reason))}
}

// tunnelConn is a tunnel's connection: what the node sent after its 101
// answer first, then the connection.
type tunnelConn struct {
	net.Conn
	r *bufio.Reader
}

func (t *tunnelConn) Read(p []byte) (int, error) { return t.r.Read(p) }

// CloseWrite half-closes the tunnel when the connection can.
func (t *tunnelConn) CloseWrite() error {
	if cw, ok := t.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
