package service

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// ParsePort reads a TCP port number, 1-65535.
func ParsePort(s string) (int, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%w: port %q: want 1-65535", errdefs.ErrInvalidArgument, Clip(s))
	}
	return int(n), nil
}

// ParseIngressHost reads {port}-{sandbox}.{domain}[:apiport] (any case, a
// trailing dot allowed), the host name that reaches a sandbox's port. ok
// is false for a host that is not an ingress name; an ingress name with an
// impossible port or sandbox id has ok true and id "" (it answers 404, as
// an unknown sandbox does).
func ParseIngressHost(host, domain string) (id string, port int, ok bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	label, found := strings.CutSuffix(host, "."+strings.ToLower(domain))
	if !found || label == "" || strings.Contains(label, ".") {
		return "", 0, false
	}
	portText, id, found := strings.Cut(label, "-")
	if !found || portText == "" || strings.Trim(portText, "0123456789") != "" {
		return "", 0, false
	}
	p, err := ParsePort(portText)
	if err != nil || !sandbox.ValidID(id) {
		return "", 0, true
	}
	return id, p, true
}

// AnyPort is the port of the ServicePort row that stands for every HTTP
// port of a sandbox made through the E2B API (its E2B port rule; SPACE's
// own API takes ports 1-65535 only, so it can neither make nor remove it).
const AnyPort = 0

// PortTokenPrefix starts every port access token, so that a leaked one is
// recognisable.
const PortTokenPrefix = "spt_"

// ExposeParams is what an expose asks for.
type ExposeParams struct {
	Port int
	// Protocol is "http" or "tcp" ("": http).
	Protocol string
	// Public ports need no credential; a private one gets a token.
	Public bool
}

// ExposePort exposes port p.Port of sandbox id through the ingress, and
// returns the recorded port with the token of a private one (only its hash
// is stored, so this is the one time it is seen). Exposing a port again
// replaces it, and a private port gets a new token each time.
func (s *Sandboxes) ExposePort(ctx context.Context, c Caller, id string, p ExposeParams) (store.ServicePort, string, error) {
	sb, err := s.Get(ctx, c, id)
	if err != nil {
		return store.ServicePort{}, "", err
	}
	if p.Port < 1 || p.Port > 65535 {
		return store.ServicePort{}, "", fmt.Errorf("%w: port %d: want 1-65535", errdefs.ErrInvalidArgument, p.Port)
	}
	if p.Protocol == "" {
		p.Protocol = "http"
	}
	if p.Protocol != "http" && p.Protocol != "tcp" {
		return store.ServicePort{}, "", fmt.Errorf("%w: protocol %q: want http or tcp", errdefs.ErrInvalidArgument, Clip(p.Protocol))
	}
	if sb.State == sandbox.StateDeleting {
		return store.ServicePort{}, "", fmt.Errorf("%w: sandbox %s is %s", errdefs.ErrConflict, sb.ID, sb.State)
	}
	sp := store.ServicePort{Sandbox: sb.ID, Port: p.Port, Protocol: p.Protocol, Public: p.Public, CreatedAt: time.Now().UTC()}
	var token string
	if !p.Public {
		token = newPortToken()
		sp.TokenHash = HashPortToken(token)
	}
	if err := s.store.PutServicePort(ctx, sp); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			err = fmt.Errorf("%w: sandbox %q", errdefs.ErrNotFound, sb.ID)
		}
		return store.ServicePort{}, "", err
	}
	s.Event(ctx, sb.ID, "port", fmt.Sprintf("port %d exposed (%s, %s)", sp.Port, sp.Protocol, visibility(sp.Public)))
	return sp, token, nil
}

// ListPorts returns sandbox id's exposed ports.
func (s *Sandboxes) ListPorts(ctx context.Context, c Caller, id string) ([]store.ServicePort, error) {
	sb, err := s.Get(ctx, c, id)
	if err != nil {
		return nil, err
	}
	return s.store.ListServicePorts(ctx, sb.ID)
}

// UnexposePort stops exposing port of sandbox id.
func (s *Sandboxes) UnexposePort(ctx context.Context, c Caller, id string, port int) error {
	sb, err := s.Get(ctx, c, id)
	if err != nil {
		return err
	}
	if err := s.store.DeleteServicePort(ctx, sb.ID, port); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			err = fmt.Errorf("%w: port %d of sandbox %s is not exposed", errdefs.ErrNotFound, port, sb.ID)
		}
		return err
	}
	s.Event(ctx, sb.ID, "port", fmt.Sprintf("port %d no longer exposed", port))
	return nil
}

func visibility(public bool) string {
	if public {
		return "public"
	}
	return "private"
}

// newPortToken returns a fresh access token: 256 random bits.
func newPortToken() string {
	b := make([]byte, 32)
	// crypto/rand.Read never fails on Linux (Go 1.24+).
	_, _ = rand.Read(b)
	return PortTokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// HashPortToken is the stored form of a port token: hex SHA-256. The token
// has 256 random bits, so a fast hash is enough.
func HashPortToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// PortTokenMatches reports, in constant time, whether token hashes to
// stored (a ServicePort's TokenHash; "" never matches).
func PortTokenMatches(token, stored string) bool {
	if stored == "" {
		return false
	}
	got := HashPortToken(token)
	return subtle.ConstantTimeCompare([]byte(got), []byte(stored)) == 1
}

// HTTPPorts is the rule for every HTTP port of a sandbox made through the
// E2B API: public or behind the traffic access token, and the Host its
// requests carry (store.ServicePort.HostMask; "" for the request's own).
type HTTPPorts struct {
	Public   bool
	HostMask string
}

// HostMaskPort is the placeholder of a host mask that stands for the
// port (E2B's ${PORT}).
const HostMaskPort = "${PORT}"

// MaskedHost is the Host a request to port carries under mask, "" for
// none (the request's own): HostMaskPort replaced with the port.
func MaskedHost(mask string, port int) string {
	if mask == "" {
		return ""
	}
	return strings.ReplaceAll(mask, HostMaskPort, strconv.Itoa(port))
}

// OpenHTTPPorts records sandbox id's rule for every HTTP port (the
// ServicePort row of AnyPort, made for sandboxes created through the E2B
// API): public, or behind the E2B traffic access token, and its host mask.
// The ingress uses it for a port that is not exposed itself.
func (s *Sandboxes) OpenHTTPPorts(ctx context.Context, c Caller, id string, rule HTTPPorts) error {
	sb, err := s.Get(ctx, c, id)
	if err != nil {
		return err
	}
	if err := s.store.PutServicePort(ctx, store.ServicePort{Sandbox: sb.ID, Port: AnyPort, Protocol: "http", Public: rule.Public, HostMask: rule.HostMask, CreatedAt: time.Now().UTC()}); err != nil {
		return err
	}
	if rule.Public {
		s.Event(ctx, sb.ID, "port", "every HTTP port public (E2B allowPublicTraffic)")
	} else {
		s.Event(ctx, sb.ID, "port", "every HTTP port behind the E2B traffic access token")
	}
	if rule.HostMask != "" {
		s.Event(ctx, sb.ID, "port", "every HTTP port gets Host "+rule.HostMask+" (E2B maskRequestHost)")
	}
	return nil
}

// HTTPPortsRule returns sandbox id's rule for every HTTP port: ok false
// when it has none (a sandbox made through SPACE's own API).
func (s *Sandboxes) HTTPPortsRule(ctx context.Context, id string) (rule HTTPPorts, ok bool, err error) {
	sp, err := s.store.GetServicePort(ctx, id, AnyPort)
	if errdefs.IsNotFound(err) {
		return HTTPPorts{}, false, nil
	}
	if err != nil {
		return HTTPPorts{}, false, err
	}
	return HTTPPorts{Public: sp.Public, HostMask: sp.HostMask}, true, nil
}

// PortRule returns sandbox id, whichever its tenant, and the rule for its
// port, for the ingress to check the request's credentials against: the
// exposed port, else, for protocol http, the rule for every HTTP port.
// NotFound when the sandbox is gone (or going) or neither exists.
func (s *Sandboxes) PortRule(ctx context.Context, id string, port int, protocol string) (*sandbox.Sandbox, store.ServicePort, error) {
	sb, err := s.store.GetSandboxByID(ctx, id)
	if err == nil && (sb.State == sandbox.StateDeleted || sb.State == sandbox.StateDeleting) {
		err = errdefs.ErrNotFound
	}
	if err != nil {
		return nil, store.ServicePort{}, err
	}
	sp, err := s.store.GetServicePort(ctx, id, port)
	if errors.Is(err, errdefs.ErrNotFound) && protocol == "http" {
		sp, err = s.store.GetServicePort(ctx, id, AnyPort)
	}
	return sb, sp, err
}
