// Package ingress is ServicePort ingress: HTTP and TCP from outside to the
// ports sandboxes expose (docs/ports.md), an adapter over internal/service
// composed by internal/server, which gives it what it needs of the control
// plane through Host. It imports no other adapter.
package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/apikey"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// ServicePort ingress: HTTP and TCP from outside to a port a sandbox
// exposed, through the node that runs it and that execution's gateway.
//
// Three ways in for HTTP: a Host of {port}-{sandbox}.{ingress domain} (any
// path: the guest sees the path as sent); for clients without the domain's
// DNS, the headers X-Space-Sandbox and X-Space-Port on any path, or
// /v1/sandboxes/{id}/ports/{port}/proxy/{path...}. TCP is
// GET /v1/sandboxes/{id}/ports/{port}/tcp with "Upgrade: space-tcp".
//
// A public port needs no credentials. A private one needs the owning
// tenant's API key (Authorization: Bearer) or the port's token
// (X-Space-Port-Token, or the space_port_token query parameter). Neither
// reaches the guest; an Authorization header that is not a SPACE API key
// is the application's and passes through.
//
// A sandbox made through the E2B API also has a rule for every HTTP port
// (port 0, internal/e2bapi traffic.go), used when the port itself is not exposed:
// public, or needing E2B's e2b-traffic-access-token (or the tenant's API
// key). That header never reaches the guest either, and a wrong one is
// refused before anything is looked up.
//
// Every request to the node carries a capability minted for the sandbox's
// current execution, naming OpServicePort, the port and the protocol; the
// node checks it against the execution it runs before it opens a
// connection into the guest.

// Wrap routes requests whose Host is an ingress name, or that carry the
// ingress headers, to sandbox ports, and everything else to api.
func (a *Ingress) Wrap(api http.Handler) http.Handler {
	ingress := a.host.Instrument("ingress host", http.HandlerFunc(a.handleIngressHost))
	byHeader := a.host.Instrument("ingress header", http.HandlerFunc(a.handleIngressHeader))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := parseIngressHost(r.Host, a.domain); ok {
			ingress.ServeHTTP(w, r)
			return
		}
		if r.Header.Get(sandboxv1.SandboxHeader) != "" || r.Header.Get(sandboxv1.PortHeader) != "" {
			byHeader.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// handleIngressHeader serves a request routed by X-Space-Sandbox and
// X-Space-Port; both are needed, and neither reaches the guest.
func (a *Ingress) handleIngressHeader(w http.ResponseWriter, r *http.Request) {
	id, portText := r.Header.Get(sandboxv1.SandboxHeader), r.Header.Get(sandboxv1.PortHeader)
	r.Header.Del(sandboxv1.SandboxHeader)
	r.Header.Del(sandboxv1.PortHeader)
	if id == "" || portText == "" {
		a.host.WriteError(w, r, fmt.Errorf("%w: header routing needs both %s and %s", errdefs.ErrInvalidArgument, sandboxv1.SandboxHeader, sandboxv1.PortHeader))
		return
	}
	port, err := service.ParsePort(portText)
	if err != nil {
		a.host.WriteError(w, r, err)
		return
	}
	if !sandbox.ValidID(id) {
		id = ""
	}
	a.serveIngressHTTP(w, r, id, port, r.URL.EscapedPath())
}

// parseIngressHost reads {port}-{sandbox}.{domain} (service.ParseIngressHost).
func parseIngressHost(host, domain string) (id string, port int, ok bool) {
	return service.ParseIngressHost(host, domain)
}

// handleIngressHost serves a request sent to {port}-{sandbox}.{domain}.
func (a *Ingress) handleIngressHost(w http.ResponseWriter, r *http.Request) {
	id, port, _ := parseIngressHost(r.Host, a.domain)
	a.serveIngressHTTP(w, r, id, port, r.URL.EscapedPath())
}

// handleIngressPath serves ANY /v1/sandboxes/{id}/ports/{port}/proxy/{rest...}.
func (a *Ingress) handleIngressPath(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	port, err := service.ParsePort(r.PathValue("port"))
	if err != nil {
		a.host.WriteError(w, r, err)
		return
	}
	prefix := "/v1/sandboxes/" + id + "/ports/" + r.PathValue("port") + "/proxy"
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), prefix)
	if !ok || !strings.HasPrefix(rest, "/") {
		// The client escaped characters of the prefix: rebuild the rest
		// from its decoded form.
		rest = (&url.URL{Path: "/" + r.PathValue("rest")}).EscapedPath()
	}
	a.serveIngressHTTP(w, r, id, port, rest)
}

// ingressGrant is an authorized ingress request: the sandbox, its port,
// and whether the request's Authorization header was a SPACE API key
// (which the guest must not see).
type ingressGrant struct {
	sb         *sandbox.Sandbox
	port       store.ServicePort
	sentAPIKey bool
}

// authorizeIngress finds the rule for port of sandbox id and checks the
// request's credentials for it. protocol is what the request speaks to the
// port: an "http" request falls back to the sandbox's E2B rule for every
// port when the port itself is not exposed; a "tcp" tunnel never does. An
// unknown sandbox, a port not exposed and another tenant's sandbox all
// answer the same 404.
func (a *Ingress) authorizeIngress(r *http.Request, id string, port int, protocol string) (*ingressGrant, error) {
	notFound := fmt.Errorf("%w: no exposed port %d on sandbox %q", errdefs.ErrNotFound, port, service.Clip(id))
	if !sandbox.ValidID(id) {
		return nil, notFound
	}
	// E2B's traffic token is checked before anything is looked up, so a
	// wrong one learns nothing about which sandboxes exist.
	traffic := protocol == "http" && r.Header.Get(TrafficHeader) != ""
	if traffic && !a.host.TrafficTokenValid(id, r.Header.Get(TrafficHeader)) {
		return nil, errTrafficInvalid(id)
	}
	sb, sp, err := a.ingressRule(r.Context(), id, port, protocol)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, notFound
	} else if err != nil {
		return nil, err
	}
	key, isKey := bearerAPIKey(r)
	g := &ingressGrant{sb: sb, port: sp, sentAPIKey: isKey}
	anyPort := sp.Port == service.AnyPort
	switch {
	case sp.Public, anyPort && traffic:
		return g, nil
	case anyPort && !isKey:
		return nil, errTrafficMissing(id)
	case !anyPort && portToken(r) != "":
		if !service.PortTokenMatches(portToken(r), sp.TokenHash) {
			return nil, fmt.Errorf("%w: wrong token for port %d of sandbox %s", errdefs.ErrUnauthenticated, port, id)
		}
		return g, nil
	case !isKey:
		return nil, fmt.Errorf("%w: port %d of sandbox %s is private: send the tenant's API key (Authorization: Bearer) or the port's token (%s)",
			errdefs.ErrUnauthenticated, port, id, sandboxv1.PortTokenHeader)
	}
	tenant, err := a.ingressKeyTenant(r.Context(), key)
	if err != nil {
		return nil, err
	}
	if tenant != sb.Tenant {
		return nil, notFound
	}
	return g, nil
}

// ingressKeyTenant returns the tenant of a valid, unrevoked API key; an
// Unauthenticated error for any other (Host.KeyTenant).
func (a *Ingress) ingressKeyTenant(ctx context.Context, key apikey.Key) (string, error) {
	return a.host.KeyTenant(ctx, key)
}

// ingressRule returns sandbox id and the rule for its port
// (service.Sandboxes.PortRule).
func (a *Ingress) ingressRule(ctx context.Context, id string, port int, protocol string) (*sandbox.Sandbox, store.ServicePort, error) {
	return a.svc.PortRule(ctx, id, port, protocol)
}

// bearerAPIKey returns the request's Authorization bearer value when it has
// the shape of a SPACE API key.
func bearerAPIKey(r *http.Request) (apikey.Key, bool) {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return apikey.Key{}, false
	}
	key, err := apikey.Parse(strings.TrimSpace(raw))
	return key, err == nil
}

// dropBearerSubprotocols removes the WebSocket subprotocols that carry a
// SPACE API key (sandboxv1.WSBearerPrefix, how the console authenticates its
// terminal) from a request bound for a sandbox: the key is the server's to
// read, never the sandbox's, whoever sent it there. The application's own
// subprotocols pass.
func dropBearerSubprotocols(h http.Header) {
	vals := h.Values("Sec-WebSocket-Protocol")
	if len(vals) == 0 {
		return
	}
	var kept []string
	for _, v := range vals {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" && !strings.HasPrefix(p, sandboxv1.WSBearerPrefix) {
				kept = append(kept, p)
			}
		}
	}
	h.Del("Sec-WebSocket-Protocol")
	if len(kept) > 0 {
		h.Set("Sec-WebSocket-Protocol", strings.Join(kept, ", "))
	}
}

// portToken returns the port token of the request: the header, else the
// query parameter.
func portToken(r *http.Request) string {
	if t := r.Header.Get(sandboxv1.PortTokenHeader); t != "" {
		return t
	}
	return r.URL.Query().Get(sandboxv1.PortTokenQuery)
}

// withoutPortToken returns a raw query without the space_port_token
// parameter, the others in their order and encoding.
func withoutPortToken(raw string) string { return withoutParams(raw, sandboxv1.PortTokenQuery) }

// withoutParams returns a raw query without the parameters named, the
// others in their order and encoding (a parameter is matched by its
// decoded name, so an encoded spelling does not slip through).
func withoutParams(raw string, names ...string) string {
	if raw == "" {
		return raw
	}
	parts := strings.Split(raw, "&")
	kept := parts[:0]
	for _, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if name, err := url.QueryUnescape(k); err == nil && slices.Contains(names, name) {
			continue
		}
		kept = append(kept, p)
	}
	return strings.Join(kept, "&")
}

// readyForIngress wakes a sandbox with an idle policy and returns it
// running, or a conflict naming its state.
func (a *Ingress) readyForIngress(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Sandbox, error) {
	if sb.State != sandbox.StateRunning && sb.IdleTimeout > 0 {
		woken, err := a.svc.Wake(ctx, sb)
		if err != nil {
			return nil, err
		}
		sb = woken
	}
	if sb.State != sandbox.StateRunning {
		return nil, fmt.Errorf("%w: sandbox %s is %s, not running", errdefs.ErrConflict, sb.ID, sb.State)
	}
	return sb, nil
}

// serveIngressHTTP proxies one HTTP request (WebSocket and other upgrades
// included) to port of sandbox id; rest is the escaped path the guest gets.
func (a *Ingress) serveIngressHTTP(w http.ResponseWriter, r *http.Request, id string, port int, rest string) {
	g, err := a.authorizeIngress(r, id, port, "http")
	if err != nil {
		a.writeIngressError(w, r, err)
		return
	}
	if g.port.Protocol != "http" {
		a.host.WriteError(w, r, fmt.Errorf("%w: port %d of sandbox %s is exposed as %s: use `space port forward` or GET …/ports/%d/tcp with Upgrade: %s",
			errdefs.ErrInvalidArgument, port, id, g.port.Protocol, port, sandboxv1.TCPUpgrade))
		return
	}
	sb, err := a.readyForIngress(r.Context(), g.sb)
	if err != nil {
		a.host.WriteError(w, r, err)
		return
	}
	// The request holds a stream slot of its tenant for its life (an
	// upgraded WebSocket until it closes: ServeHTTP returns then), as
	// tunnels do: the node caps port requests per execution only.
	release, err := a.host.OpenStream(sb, "http")
	if err != nil {
		a.host.WriteError(w, r, err)
		return
	}
	defer release()
	pt, err := a.newPortTransport(sb, uint16(port), "http")
	if err != nil {
		a.host.WriteError(w, r, err)
		return
	}
	if rest == "" {
		rest = "/"
	}
	target, err := url.Parse("http://port" + rest)
	if err != nil {
		a.host.WriteError(w, r, fmt.Errorf("%w: path %q: %v", errdefs.ErrInvalidArgument, service.Clip(rest), err))
		return
	}
	query := withoutPortToken(r.URL.RawQuery)
	stripAuth := g.sentAPIKey
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = &url.URL{Scheme: "http", Host: "port", Path: target.Path, RawPath: target.RawPath, RawQuery: query}
			pr.Out.Host = pr.In.Host
			if h := service.MaskedHost(g.port.HostMask, port); h != "" {
				// E2B's maskRequestHost: the port sees this Host, and the
				// client's in X-Forwarded-Host.
				pr.Out.Host = h
			}
			pr.SetXForwarded()
			pr.Out.Header.Del(sandboxv1.PortTokenHeader)
			pr.Out.Header.Del(TrafficHeader)
			pr.Out.Header.Del(capability.Header)
			if stripAuth {
				pr.Out.Header.Del("Authorization")
			}
			dropBearerSubprotocols(pr.Out.Header)
		},
		Transport:     pt,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away
			}
			if !errors.Is(err, errdefs.ErrRefreshRoute) && !errors.Is(err, errdefs.ErrUnavailable) {
				err = fmt.Errorf("%w: sandbox %s port %d: %v", errdefs.ErrUnavailable, id, port, err)
			}
			a.host.WriteError(w, r, err)
		},
	}
	_ = http.NewResponseController(w).EnableFullDuplex()
	proxy.ServeHTTP(w, r)
}
