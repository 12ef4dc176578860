package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/restapi"
	"github.com/spacesandbox/space/internal/route"
	"github.com/spacesandbox/space/internal/sandbox"
)

// maxGuestMessage bounds one message read from the guest protocol.
const maxGuestMessage = 32 << 20

// guestClientOptions configure the Connect clients of the guest protocol.
// They do not offer gzip: Connect clients offer it by default, and the guest
// then compresses every stream message (an exec's start, output and end)
// and the control plane inflates it, a fresh inflater per request, for
// bytes that only cross local sockets. Raw requests of E2B SDKs that
// e2bProxy forwards keep their own Accept-Encoding.
var guestClientOptions = []connect.ClientOption{
	connect.WithReadMaxBytes(maxGuestMessage),
	connect.WithAcceptCompression("gzip", nil, nil),
}

// nodeWait is how long a request waits for its node to report after a
// restart of the control plane (nodes report every two seconds).
const nodeWait = 5 * time.Second

// guestBase is the virtual origin of guest requests; routeTransport sends
// them to the node and execution of the sandbox's current route.
const guestBase = "http://guest"

// guestFor returns the guest of a running sandbox, for operations op: every
// request carries a capability bound to the sandbox's current execution,
// which the node checks against the execution it runs.
func (s *Server) guestFor(ctx context.Context, sb *sandbox.Sandbox, op capability.Op) (*restapi.Guest, error) {
	if sb.State != sandbox.StateRunning && sb.IdleTimeout > 0 {
		woken, err := s.svc.Wake(ctx, sb)
		if err != nil {
			return nil, err
		}
		*sb = *woken
	}
	if sb.State != sandbox.StateRunning {
		return nil, fmt.Errorf("%w: sandbox %s is %s, not running", errdefs.ErrConflict, sb.ID, sb.State)
	}
	rt, err := s.routeFor(sb, op)
	if err != nil {
		return nil, err
	}
	t := &routeTransport{s: s, sandbox: sb.ID, op: op}
	t.route.Store(rt)
	hc := &http.Client{Transport: t}
	return &restapi.Guest{
		HTTP:    hc,
		Base:    guestBase,
		Process: routedProcess{hc},
		Files:   routedFiles{hc},
	}, nil
}

// identityOf is the execution identity a sandbox record names.
func identityOf(sb *sandbox.Sandbox) capability.Identity {
	return capability.Identity{Sandbox: sb.ID, Generation: sb.Generation, Node: sb.Node, Substrate: sb.Runtime, Activation: sb.ActivationID}
}

// routeFor returns the cached route of sb for op when it still names sb's
// current execution, else a fresh one (cached).
func (s *Server) routeFor(sb *sandbox.Sandbox, op capability.Op) (*route.Route, error) {
	now := time.Now()
	if rt := s.routes.Get(sb.ID, op, now); rt != nil && rt.Identity == identityOf(sb) && rt.ExecID == sb.ExecID {
		return rt, nil
	}
	rt, err := s.mintRoute(sb, op, time.Time{})
	if err != nil {
		return nil, err
	}
	s.routes.Put(rt)
	return rt, nil
}

// mintRoute makes a route to sb's current execution, its capability valid
// until until (zero: the full lifetime).
func (s *Server) mintRoute(sb *sandbox.Sandbox, op capability.Op, until time.Time) (*route.Route, error) {
	id := identityOf(sb)
	signer, err := s.signer()
	if err != nil {
		return nil, err
	}
	tok, err := signer.MintUntil(id, op, 0, "", until)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: capability: %w", sb.ID, err)
	}
	c, err := capability.Verify(tok, s.keySet(), time.Now())
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: capability: %w", sb.ID, err)
	}
	return &route.Route{Identity: id, ExecID: sb.ExecID, Op: op, Token: capability.Encode(tok), Expires: c.ExpiresAt}, nil
}

// nodeUnavailable passes on a 503 answer, unless the node itself refused
// every capability because its clock disagrees with the control plane's
// (errdefs.ErrClockSkew): then the caller gets the node's reason as that
// error (of class Unavailable), not a bare "HTTP status 503" from the guest
// protocol's client.
func nodeUnavailable(resp *http.Response) (*http.Response, error) {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	refusal, msg := apierr.DecodeBody(body)
	if !errors.Is(refusal, errdefs.ErrClockSkew) || msg == "" {
		return resp, nil
	}
	resp.Body.Close()
	return nil, fmt.Errorf("%w: %.300s", errdefs.ErrClockSkew, msg)
}

// routeTransport sends guest requests along the sandbox's current route and
// repairs it once when the node answers RefreshRoute: the sandbox is read
// again, the cached route replaced by compare-and-swap (a late rejection
// never evicts a newer route), and the request retried once if it can be
// replayed (reads and other idempotent operations; never process starts,
// input or uploads). A repaired route keeps the expiry of the rejected one.
type routeTransport struct {
	s       *Server
	sandbox string
	op      capability.Op
	route   atomic.Pointer[route.Route]
}

func (t *routeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rt := t.route.Load()
	resp, err := t.send(req, rt)
	if err == nil && resp.StatusCode == http.StatusServiceUnavailable {
		return nodeUnavailable(resp)
	}
	if err != nil || resp.StatusCode != http.StatusConflict || rt.Repaired {
		return resp, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if refusal, _ := apierr.DecodeBody(body); !errors.Is(refusal, errdefs.ErrRefreshRoute) {
		return resp, nil
	}
	t.s.metrics.countRouteRefresh("received")
	fresh := t.s.resolveRoute(req.Context(), t.sandbox, t.op, rt)
	repaired := t.s.routes.Repair(rt, fresh, time.Now())
	if repaired == nil || repaired == rt {
		t.s.metrics.countRouteRefresh("unresolved")
		return resp, nil
	}
	t.route.Store(repaired)
	if !replayable(req) {
		// The next request of this connection uses the repaired route;
		// this one is not replayed, and the client is told it may retry.
		t.s.metrics.countRouteRefresh("not_replayed")
		resp.Body.Close()
		return nil, fmt.Errorf("%w: sandbox %s moved from generation %d to %d while the request was on its way; it was not run and can be retried",
			restapi.ErrRouteChanged, t.sandbox, rt.Identity.Generation, repaired.Identity.Generation)
	}
	retry := req.Clone(req.Context())
	if req.GetBody != nil {
		if retry.Body, err = req.GetBody(); err != nil {
			return resp, nil
		}
	}
	t.s.metrics.countRouteRefresh("retried")
	t.s.log.Info("route repaired", "sandbox", t.sandbox, "from_generation", rt.Identity.Generation, "from_node", rt.Identity.Node,
		"to_generation", repaired.Identity.Generation, "to_node", repaired.Identity.Node)
	return t.send(retry, repaired)
}

// send sends req (addressed to guestBase) to rt's node and execution with
// rt's capability.
func (t *routeTransport) send(req *http.Request, rt *route.Route) (*http.Response, error) {
	sent := time.Now()
	resp, err := t.sendOnce(req, rt)
	if err == nil || !nodeNotListening(err) {
		return resp, err
	}
	// The node is known (from the store) but not listening: it is
	// restarting, as with a control plane that restarted with it. Its next
	// heartbeat says it is back (with its address and token, which may be
	// new); the request is sent once more then, when its body can be
	// rebuilt (a refused dial sent none of it).
	if !t.s.nodes.waitHeartbeat(req.Context(), rt.Identity.Node, sent, nodeWait) {
		return nil, err
	}
	retry := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, err
		}
		body, berr := req.GetBody()
		if berr != nil {
			return nil, err
		}
		retry.Body = body
	}
	return t.sendOnce(retry, rt)
}

func (t *routeTransport) sendOnce(req *http.Request, rt *route.Route) (*http.Response, error) {
	nc, err := t.s.nodes.clientWait(req.Context(), rt.Identity.Node, nodeWait)
	if err != nil {
		return nil, err
	}
	shared, base := nc.GuestHTTP(rt.ExecID)
	out := req.Clone(req.Context())
	u, err := url.Parse(base + req.URL.Path)
	if err != nil {
		return nil, err
	}
	u.RawQuery = req.URL.RawQuery
	out.URL, out.Host = u, u.Host
	out.Header.Set(capability.Header, rt.Token)
	return shared.Transport.RoundTrip(out)
}

// nodeNotListening reports whether err is a dial to a node that nothing
// listens on (connection refused, or its unix socket is missing).
func nodeNotListening(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && (errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT))
}

// resolveRoute reads the sandbox again after a RefreshRoute and returns a
// route to its current execution, keeping the rejected route's expiry; nil
// when the sandbox is gone, not running, or still names the rejected
// execution (the store has not caught up: nothing to repair to).
func (s *Server) resolveRoute(ctx context.Context, sandboxID string, op capability.Op, rejected *route.Route) *route.Route {
	sb, err := s.store.GetSandboxByID(ctx, sandboxID)
	if err != nil || sb.State != sandbox.StateRunning {
		return nil
	}
	if identityOf(sb) == rejected.Identity && sb.ExecID == rejected.ExecID {
		return nil
	}
	if !time.Now().Before(rejected.Expires) {
		return nil
	}
	rt, err := s.mintRoute(sb, op, rejected.Expires)
	if err != nil {
		return nil
	}
	return rt
}

// replayable reports whether a guest request may be sent again after a
// route repair: reads and idempotent operations whose body can be rebuilt.
func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		return true
	}
	switch req.URL.Path {
	case "/filesystem.Filesystem/Stat", "/filesystem.Filesystem/ListDir", "/process.Process/List":
		return true
	}
	return false
}
