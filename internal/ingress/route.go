package ingress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// portRoute is where one ingress request goes: an execution, and a
// capability for it naming the port and protocol.
type portRoute struct {
	id       capability.Identity
	execID   string
	token    string
	expires  time.Time
	repaired bool
}

// mintPortRoute makes a route to port of sb's current execution, its
// capability valid until until (zero: the full lifetime). Ingress routes
// are not cached: the route cache holds one route per operation, and a
// port capability is good for one port only.
func (a *Ingress) mintPortRoute(sb *sandbox.Sandbox, port uint16, protocol string, until time.Time) (*portRoute, error) {
	id := a.host.Identity(sb)
	signer, err := a.host.Signer()
	if err != nil {
		return nil, err
	}
	tok, err := signer.MintUntil(id, capability.OpServicePort, port, protocol, until)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: port %d: capability: %w", sb.ID, port, err)
	}
	c, err := capability.Verify(tok, a.host.KeySet(), time.Now())
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: port %d: capability: %w", sb.ID, port, err)
	}
	return &portRoute{id: id, execID: sb.ExecID, token: capability.Encode(tok), expires: c.ExpiresAt}, nil
}

// refreshPortRoute reads the sandbox again after the node answered
// RefreshRoute to rejected and returns a route to its current execution
// with the rejected route's expiry; nil when there is nothing to repair to
// (the sandbox is gone or not running, or the store still names the
// rejected execution), or when rejected was itself a repair: one retry.
func (a *Ingress) refreshPortRoute(ctx context.Context, sandboxID string, port uint16, protocol string, rejected *portRoute) *portRoute {
	if rejected.repaired || !time.Now().Before(rejected.expires) {
		return nil
	}
	sb, err := a.svc.ByID(ctx, sandboxID)
	if err != nil || sb.State != sandbox.StateRunning {
		return nil
	}
	if a.host.Identity(sb) == rejected.id && sb.ExecID == rejected.execID {
		return nil
	}
	rt, err := a.mintPortRoute(sb, port, protocol, rejected.expires)
	if err != nil {
		return nil
	}
	rt.repaired = true
	return rt
}

// portTransport sends one ingress HTTP request (addressed to http://port/…)
// to the node running the sandbox, with a capability for the port. When the
// node answers RefreshRoute it reads the sandbox again and sends the
// request once more to the new execution, if the request can be replayed:
// an idempotent method without a body (WebSocket handshakes included);
// otherwise the client gets a refresh_route error saying a retry is safe.
type portTransport struct {
	a        *Ingress
	sandbox  string
	port     uint16
	protocol string
	route    *portRoute
}

func (a *Ingress) newPortTransport(sb *sandbox.Sandbox, port uint16, protocol string) (*portTransport, error) {
	rt, err := a.mintPortRoute(sb, port, protocol, time.Time{})
	if err != nil {
		return nil, err
	}
	return &portTransport{a: a, sandbox: sb.ID, port: port, protocol: protocol, route: rt}, nil
}

func (t *portTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rt := t.route
	resp, err := t.send(req, rt)
	if err != nil || resp.StatusCode != http.StatusConflict || rt.repaired {
		return resp, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if refusal, _ := apierr.DecodeBody(body); !errors.Is(refusal, errdefs.ErrRefreshRoute) {
		return resp, nil
	}
	t.a.host.CountRouteRefresh("received")
	fresh := t.a.refreshPortRoute(req.Context(), t.sandbox, t.port, t.protocol, rt)
	if fresh == nil {
		t.a.host.CountRouteRefresh("unresolved")
		return resp, nil
	}
	t.route = fresh
	if !replayableIngress(req) {
		t.a.host.CountRouteRefresh("not_replayed")
		return nil, fmt.Errorf("%w: sandbox %s moved from generation %d to %d while the request was on its way; it was not sent to the port and can be retried",
			errdefs.ErrRefreshRoute, t.sandbox, rt.id.Generation, fresh.id.Generation)
	}
	t.a.host.CountRouteRefresh("retried")
	t.a.log.Info("ingress route repaired", "sandbox", t.sandbox, "port", t.port,
		"from_generation", rt.id.Generation, "to_generation", fresh.id.Generation, "to_node", fresh.id.Node)
	return t.send(req.Clone(req.Context()), fresh)
}

// send sends req to rt's node and execution.
func (t *portTransport) send(req *http.Request, rt *portRoute) (*http.Response, error) {
	nc, err := t.a.host.Node(req.Context(), rt.id.Node)
	if err != nil {
		return nil, err
	}
	hc, base := nc.PortHTTP(rt.execID, t.port)
	u, err := url.Parse(base + req.URL.EscapedPath())
	if err != nil {
		return nil, err
	}
	u.RawQuery = req.URL.RawQuery
	out := req.Clone(req.Context())
	out.URL = u // out.Host stays the client's: the guest sees it
	out.Header.Set(capability.Header, rt.token)
	return hc.Transport.RoundTrip(out)
}

// replayableIngress reports whether an ingress request may be sent again
// after a route repair: an idempotent method, no body.
func replayableIngress(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// PortTransport carries HTTP requests (addressed to http://port/…) to port
// of sb's current execution through its node, with a capability for the
// port and the route repair of ingress requests: the REST API's way to a
// server in the sandbox (its code interpreter).
func (a *Ingress) PortTransport(sb *sandbox.Sandbox, port uint16) (http.RoundTripper, error) {
	return a.newPortTransport(sb, port, "http")
}
