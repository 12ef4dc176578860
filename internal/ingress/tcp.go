package ingress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/nodeclient"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
)

// handleIngressTCP serves GET /v1/sandboxes/{id}/ports/{port}/tcp with
// "Connection: Upgrade" and "Upgrade: space-tcp": once the node has opened
// the guest port, the answer is 101 and the connection carries the bytes of
// one TCP connection to it, both ways, half-closes included.
func (a *Ingress) handleIngressTCP(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), sandboxv1.TCPUpgrade) {
		a.host.WriteError(w, r, fmt.Errorf("%w: a TCP tunnel needs \"Connection: Upgrade\" and \"Upgrade: %s\"", errdefs.ErrInvalidArgument, sandboxv1.TCPUpgrade))
		return
	}
	id := r.PathValue("id")
	port, err := service.ParsePort(r.PathValue("port"))
	if err != nil {
		a.host.WriteError(w, r, err)
		return
	}
	g, err := a.authorizeIngress(r, id, port, "tcp")
	if err != nil {
		a.host.WriteError(w, r, err)
		return
	}
	if g.port.Protocol != "tcp" {
		a.host.WriteError(w, r, fmt.Errorf("%w: port %d of sandbox %s is exposed as %s, not tcp", errdefs.ErrInvalidArgument, port, id, g.port.Protocol))
		return
	}
	sb, err := a.readyForIngress(r.Context(), g.sb)
	if err != nil {
		a.host.WriteError(w, r, err)
		return
	}
	release, err := a.host.OpenStream(sb, "tcp")
	if err != nil {
		a.host.WriteError(w, r, err)
		return
	}
	defer release()
	guest, err := a.dialPortTCP(r.Context(), sb, uint16(port))
	if err != nil {
		a.host.WriteError(w, r, err)
		return
	}
	defer guest.Close()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		a.host.WriteError(w, r, fmt.Errorf("%w: cannot take over the connection: %v", errdefs.ErrUnavailable, err))
		return
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+sandboxv1.TCPUpgrade+"\r\n\r\n"); err != nil {
		return
	}
	// Whatever the client sent after its request head is the tunnel's.
	var client io.Reader = conn
	if n := brw.Reader.Buffered(); n > 0 {
		head, _ := brw.Reader.Peek(n)
		client = io.MultiReader(bytes.NewReader(bytes.Clone(head)), conn)
	}
	relay(conn, client, guest)
}

// dialPortTCP opens a tunnel to port of sb's current execution, repairing
// the route once when the node answers RefreshRoute (a tunnel request has
// no body: it can always be sent again).
func (a *Ingress) dialPortTCP(ctx context.Context, sb *sandbox.Sandbox, port uint16) (net.Conn, error) {
	rt, err := a.mintPortRoute(sb, port, "tcp", time.Time{})
	if err != nil {
		return nil, err
	}
	conn, err := a.dialPortRoute(ctx, rt, port)
	if !errors.Is(err, nodeclient.ErrRefreshRoute) {
		return conn, err
	}
	a.host.CountRouteRefresh("received")
	fresh := a.refreshPortRoute(ctx, sb.ID, port, "tcp", rt)
	if fresh == nil {
		a.host.CountRouteRefresh("unresolved")
		return nil, fmt.Errorf("%w: sandbox %s port %d: the node runs another execution of the sandbox; retry", errdefs.ErrUnavailable, sb.ID, port)
	}
	a.host.CountRouteRefresh("retried")
	a.log.Info("ingress route repaired", "sandbox", sb.ID, "port", port,
		"from_generation", rt.id.Generation, "to_generation", fresh.id.Generation, "to_node", fresh.id.Node)
	conn, err = a.dialPortRoute(ctx, fresh, port)
	if errors.Is(err, nodeclient.ErrRefreshRoute) {
		return nil, fmt.Errorf("%w: sandbox %s port %d: the node runs another execution of the sandbox; retry", errdefs.ErrUnavailable, sb.ID, port)
	}
	return conn, err
}

func (a *Ingress) dialPortRoute(ctx context.Context, rt *portRoute, port uint16) (net.Conn, error) {
	nc, err := a.host.Node(ctx, rt.id.Node)
	if err != nil {
		return nil, err
	}
	conn, err := nc.DialPortTCP(ctx, rt.execID, port, rt.token)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s port %d: %w", rt.id.Sandbox, port, err)
	}
	return conn, nil
}

// relay copies client→guest and guest→conn until both directions end.
// A clean end of one direction is passed on as a half-close; a failure
// closes both connections, which ends the other direction too. client is
// what conn reads, with any bytes already buffered first.
func relay(conn net.Conn, client io.Reader, guest net.Conn) {
	done := make(chan struct{}, 2)
	pipe := func(dst net.Conn, src io.Reader) {
		if _, err := io.Copy(dst, src); err != nil {
			conn.Close()
			guest.Close()
		} else {
			closeWrite(dst)
		}
		done <- struct{}{}
	}
	go pipe(guest, client)
	go pipe(conn, guest)
	<-done
	<-done
}

// closeWrite half-closes c when it can, else closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() == nil {
			return
		}
	}
	_ = c.Close()
}
