package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/spacesandbox/space/internal/apikey"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/ingress"
	"github.com/spacesandbox/space/internal/sandbox"
)

// ingressHost is what ServicePort ingress (internal/ingress) uses of this
// server: its error answers, metrics, capabilities, node connections, API
// keys and the E2B surface's traffic tokens.
type ingressHost struct{ s *Server }

var _ ingress.Host = ingressHost{}

func (h ingressHost) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	h.s.writeError(w, r, err)
}

func (h ingressHost) Instrument(pattern string, next http.Handler) http.Handler {
	return h.s.instrument(pattern, next)
}

func (h ingressHost) CountRouteRefresh(outcome string) { h.s.metrics.countRouteRefresh(outcome) }

func (h ingressHost) Signer() (*capability.Signer, error) { return h.s.signer() }

func (h ingressHost) KeySet() *capability.KeySet { return h.s.keySet() }

func (h ingressHost) Identity(sb *sandbox.Sandbox) capability.Identity { return identityOf(sb) }

func (h ingressHost) Node(ctx context.Context, id string) (ingress.Node, error) {
	c, err := h.s.nodes.clientWait(ctx, id, nodeWait)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// OpenStream takes one of sb's tenant's stream slots for a TCP tunnel or
// an HTTP request to one of its ports (the node caps both per execution;
// the tenant's cap bounds them across its sandboxes).
func (h ingressHost) OpenStream(sb *sandbox.Sandbox, protocol string) (func(), error) {
	surface := surfaceTCP
	if protocol == "http" {
		surface = surfacePortHTTP
	}
	return h.s.streams.acquire(surface, sb.Tenant, "")
}

// KeyTenant returns the tenant of a valid, unrevoked API key; errBadKey
// for any other.
func (h ingressHost) KeyTenant(ctx context.Context, key apikey.Key) (string, error) {
	stored, err := h.s.store.GetAPIKey(ctx, key.ID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", errBadKey
	} else if err != nil {
		return "", err
	}
	if stored.Revoked() || !key.Matches(stored.Hash) {
		return "", errBadKey
	}
	return stored.Tenant, nil
}

func (h ingressHost) TrafficTokenValid(id, token string) bool {
	return h.s.e2bAPI.TrafficTokenValid(id, token)
}

// newIngress is the ServicePort ingress of s.
func (s *Server) newIngress() *ingress.Ingress {
	return ingress.New(ingress.Config{
		Service: s.svc, Host: ingressHost{s}, Domain: s.ingressDomain(),
		Log: s.log,
	})
}
