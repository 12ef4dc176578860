package server

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// DefaultIngressDomain is the domain of the ingress host names when the
// server is given none: *.localhost resolves to the loopback address
// (RFC 6761), in curl and browsers alike.
const DefaultIngressDomain = "localhost"

// portTokenPrefix starts every port access token, so that a leaked one is
// recognisable.
const portTokenPrefix = "spt_"

// handleExposePort serves POST /v1/sandboxes/{id}/ports. Exposing a port
// again replaces it, and a private port gets a new token each time.
//
// The route does not honour Idempotency-Key: a remembered answer would keep
// the port's token in the database in the clear, and exposing is already
// safe to repeat (the last answer's token is the valid one).
func (s *Server) handleExposePort(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandboxFor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req sandboxv1.ExposePortRequest
	if err := decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Port < 1 || req.Port > 65535 {
		s.writeError(w, r, fmt.Errorf("%w: port %d: want 1-65535", errdefs.ErrInvalidArgument, req.Port))
		return
	}
	if req.Protocol == "" {
		req.Protocol = "http"
	}
	if req.Protocol != "http" && req.Protocol != "tcp" {
		s.writeError(w, r, fmt.Errorf("%w: protocol %q: want http or tcp", errdefs.ErrInvalidArgument, clip(req.Protocol)))
		return
	}
	if sb.State == sandbox.StateDeleting {
		s.writeError(w, r, fmt.Errorf("%w: sandbox %s is %s", errdefs.ErrConflict, sb.ID, sb.State))
		return
	}
	sp := store.ServicePort{Sandbox: sb.ID, Port: req.Port, Protocol: req.Protocol, Public: req.Public, CreatedAt: time.Now().UTC()}
	var token string
	if !req.Public {
		token = newPortToken()
		sp.TokenHash = hashPortToken(token)
	}
	if err := s.store.PutServicePort(r.Context(), sp); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			err = fmt.Errorf("%w: sandbox %q", errdefs.ErrNotFound, sb.ID)
		}
		s.writeError(w, r, err)
		return
	}
	s.event(r.Context(), sb.ID, "port", fmt.Sprintf("port %d exposed (%s, %s)", sp.Port, sp.Protocol, visibility(sp.Public)))
	out := s.apiPort(r, sp)
	out.Token = token
	writeJSON(w, http.StatusCreated, out)
}

// handleListPorts serves GET /v1/sandboxes/{id}/ports.
func (s *Server) handleListPorts(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandboxFor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list, err := s.store.ListServicePorts(r.Context(), sb.ID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := sandboxv1.ServicePortList{Ports: make([]sandboxv1.ServicePort, 0, len(list))}
	for _, sp := range list {
		out.Ports = append(out.Ports, s.apiPort(r, sp))
	}
	writeJSON(w, http.StatusOK, out)
}

// handleUnexposePort serves DELETE /v1/sandboxes/{id}/ports/{port}.
func (s *Server) handleUnexposePort(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandboxFor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	port, err := parsePort(r.PathValue("port"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.store.DeleteServicePort(r.Context(), sb.ID, port); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			err = fmt.Errorf("%w: port %d of sandbox %s is not exposed", errdefs.ErrNotFound, port, sb.ID)
		}
		s.writeError(w, r, err)
		return
	}
	s.event(r.Context(), sb.ID, "port", fmt.Sprintf("port %d no longer exposed", port))
	w.WriteHeader(http.StatusNoContent)
}

func visibility(public bool) string {
	if public {
		return "public"
	}
	return "private"
}

// parsePort reads a port number from a path: decimal, 1-65535.
func parsePort(s string) (int, error) { return service.ParsePort(s) }

// apiPort is what the API reports of an exposed port, with the URLs that
// reach it from the client that asked (whose Host names the API). The E2B
// rule for every HTTP port is reported as port 0, its URLs with "{port}"
// where the port goes.
func (s *Server) apiPort(r *http.Request, sp store.ServicePort) sandboxv1.ServicePort {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	apiHost := r.Host
	if apiHost == "" {
		apiHost = s.cfg.Listen
	}
	out := sandboxv1.ServicePort{Port: sp.Port, Protocol: sp.Protocol, Public: sp.Public, CreatedAt: sp.CreatedAt}
	port := strconv.Itoa(sp.Port)
	if sp.Port == e2bAnyPort {
		port = "{port}"
	}
	portPath := "/v1/sandboxes/" + sp.Sandbox + "/ports/" + port
	if sp.Protocol == "tcp" {
		out.URL = scheme + "://" + apiHost + portPath + "/tcp"
		return out
	}
	host := port + "-" + sp.Sandbox + "." + s.ingressDomain()
	if _, apiPort, err := net.SplitHostPort(apiHost); err == nil && apiPort != "" {
		host = net.JoinHostPort(host, apiPort)
	}
	out.URL = scheme + "://" + host + "/"
	out.ProxyURL = scheme + "://" + apiHost + portPath + "/proxy/"
	return out
}

// ingressDomain is the domain under which {port}-{sandbox} names route to
// sandbox ports.
func (s *Server) ingressDomain() string {
	if s.cfg.IngressDomain == "" {
		return DefaultIngressDomain
	}
	return s.cfg.IngressDomain
}

// newPortToken returns a fresh access token: 256 random bits.
func newPortToken() string {
	b := make([]byte, 32)
	// crypto/rand.Read never fails on Linux (Go 1.24+).
	_, _ = rand.Read(b)
	return portTokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// hashPortToken is the stored form of a port token: hex SHA-256. The token
// has 256 random bits, so a fast hash is enough.
func hashPortToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// portTokenMatches reports, in constant time, whether token hashes to
// stored.
func portTokenMatches(token, stored string) bool {
	if stored == "" {
		return false
	}
	got := hashPortToken(token)
	return subtle.ConstantTimeCompare([]byte(got), []byte(stored)) == 1
}
