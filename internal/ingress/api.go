package ingress

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"

	"github.com/spacesandbox/space/internal/apikey"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
)

// Host is what the ingress uses of the control plane that serves it
// besides the operations: its error answers, metrics, capabilities, node
// connections, API keys and the E2B traffic tokens. internal/server
// implements it.
type Host interface {
	// WriteError answers err as the REST API does ({code, message}).
	WriteError(w http.ResponseWriter, r *http.Request, err error)
	// Instrument counts and times the requests h serves under pattern.
	Instrument(pattern string, h http.Handler) http.Handler
	// CountRouteRefresh counts one outcome of a refresh_route answer.
	CountRouteRefresh(outcome string)
	// Signer mints capabilities; KeySet verifies them.
	Signer() (*capability.Signer, error)
	KeySet() *capability.KeySet
	// Identity is the identity sb's current execution is bound to.
	Identity(sb *sandbox.Sandbox) capability.Identity
	// Node is node id's client, waiting a little for one reconnecting.
	Node(ctx context.Context, id string) (Node, error)
	// KeyTenant is the tenant of a valid, unrevoked API key; an
	// Unauthenticated error for any other.
	KeyTenant(ctx context.Context, key apikey.Key) (string, error)
	// OpenStream takes one of sb's tenant's stream slots for a request to
	// one of its ports, protocol "tcp" (a tunnel) or "http" (a request, an
	// upgraded WebSocket included), until release is called; past the
	// tenant's cap it is refused with errdefs.ErrTooManyStreams (answered
	// 429 before the node is dialled).
	OpenStream(sb *sandbox.Sandbox, protocol string) (release func(), err error)
	// TrafficTokenValid reports whether token is sandbox id's E2B traffic
	// access token.
	TrafficTokenValid(id, token string) bool
}

// Node is what the ingress needs of a node: the way to an execution's
// port over HTTP, and a TCP tunnel to it (nodeclient.Client is one).
type Node interface {
	PortHTTP(execID string, port uint16) (*http.Client, string)
	DialPortTCP(ctx context.Context, execID string, port uint16, token string) (net.Conn, error)
}

// Config is what New needs.
type Config struct {
	Service *service.Sandboxes
	Host    Host
	// Domain is the domain of the host names that reach sandbox ports:
	// {port}-{sandbox}.{Domain}.
	Domain string
	Log    *slog.Logger
}

// Ingress serves requests to sandboxes' exposed ports.
type Ingress struct {
	svc    *service.Sandboxes
	host   Host
	domain string
	log    *slog.Logger
}

// New returns the ingress of cfg.
func New(cfg Config) *Ingress {
	return &Ingress{svc: cfg.Service, host: cfg.Host, domain: cfg.Domain, log: cfg.Log}
}

// HandlePath serves /v1/sandboxes/{id}/ports/{port}/proxy/{rest...}.
func (a *Ingress) HandlePath(w http.ResponseWriter, r *http.Request) { a.handleIngressPath(w, r) }

// HandleTCP serves GET /v1/sandboxes/{id}/ports/{port}/tcp, a TCP tunnel.
func (a *Ingress) HandleTCP(w http.ResponseWriter, r *http.Request) { a.handleIngressTCP(w, r) }

// ServeHTTPPort proxies one HTTP request to port of sandbox id; rest is the
// escaped path the guest gets (the E2B data plane's ports that are not
// envd's come here).
func (a *Ingress) ServeHTTPPort(w http.ResponseWriter, r *http.Request, id string, port int, rest string) {
	a.serveIngressHTTP(w, r, id, port, rest)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
