package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	space "github.com/spacesandbox/space/sdk/go"

	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/e2bapi"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/imagebuild"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
)

// E2BPathPrefix is the path of the E2B REST API on the API listener:
// E2B_API_URL is the API URL with it.
const E2BPathPrefix = e2bapi.PathPrefix

// e2bHost is what the E2B surface (internal/e2bapi) uses of this server:
// its authentication, metrics, error statuses, guest and node connections,
// and its ingress.
type e2bHost struct{ s *Server }

var _ e2bapi.Host = e2bHost{}

func (h e2bHost) Authenticate(next http.HandlerFunc) http.HandlerFunc { return h.s.authenticate(next) }

func (h e2bHost) Caller(ctx context.Context) service.Caller { return callerOf(ctx).service() }

func (h e2bHost) Instrument(pattern string, next http.Handler) http.Handler {
	return h.s.instrument(pattern, next)
}

func (h e2bHost) Status(err error) int {
	status, _ := statusOf(err)
	return status
}

func (h e2bHost) ObserveCreate(d time.Duration) { h.s.metrics.observeCreate(d) }

func (h e2bHost) GuestTransport(ctx context.Context, sb *sandbox.Sandbox, op capability.Op) (http.RoundTripper, error) {
	g, err := h.s.guestFor(ctx, sb, op)
	if err != nil {
		return nil, err
	}
	return g.HTTP.Transport, nil
}

func (h e2bHost) OpenStream(sb *sandbox.Sandbox) (func(), error) {
	return h.s.streams.acquire(surfaceE2B, sb.Tenant, sb.ID)
}

func (h e2bHost) ReadGuestFile(ctx context.Context, sb *sandbox.Sandbox, path, user string, limit int64) ([]byte, error) {
	g, err := h.s.guestFor(ctx, sb, capability.OpFiles)
	if err != nil {
		return nil, err
	}
	return g.ReadFile(ctx, path, user, limit)
}

func (h e2bHost) Node(ctx context.Context, id string) (e2bapi.NodeStats, error) {
	c, err := h.s.nodes.clientWait(ctx, id, nodeWait)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (h e2bHost) ServeIngressHTTP(w http.ResponseWriter, r *http.Request, id string, port int, path string) {
	h.s.ingress.ServeHTTPPort(w, r, id, port, path)
}

// BuildBackend runs an E2B template build on the public API of this very
// server, over loopback, with the key r was authenticated with: the build
// may do what its caller may, checked by the same handlers. The key stays
// in memory for the build's life, and a revoked key stops the build.
func (h e2bHost) BuildBackend(r *http.Request) (imagebuild.Backend, error) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	addr := h.s.apiAddr.Load()
	if !ok || addr == nil {
		return nil, fmt.Errorf("%w: template builds need the API listener and a bearer key", errdefs.ErrUnavailable)
	}
	return imagebuild.Client{C: space.NewClient("http://"+*addr, strings.TrimSpace(key), space.WithUserAgent("space-e2b-template-build"))}, nil
}

// loopbackAddr is where this host reaches listener address a: the
// loopback address for an unspecified one.
func loopbackAddr(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	ip := ta.IP
	switch {
	case ip == nil || ip.IsUnspecified() && ip.To4() != nil:
		ip = net.IPv4(127, 0, 0, 1)
	case ip.IsUnspecified():
		ip = net.IPv6loopback
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(ta.Port))
}

// newE2B is the E2B surface of s.
func (s *Server) newE2B() *e2bapi.API {
	return e2bapi.New(e2bapi.Config{
		Service: s.svc, Credentials: s.creds, Host: e2bHost{s}, TokenKey: s.e2bTokenKey(),
		IngressDomain: s.ingressDomain(), Log: s.log,
		MaxFileBytes: s.cfg.MaxFileBytes, UploadIdleTimeout: s.cfg.UploadIdleTimeout,
		FilesDir: s.cfg.E2BFilesDir, PublicURL: s.cfg.PublicURL, Metrics: s.store, Builds: s.store,
	})
}
