package server

import (
	"context"
	"net/http"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/restapi"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// restHost is what the REST API (internal/restapi) uses of this server:
// its authentication, metrics, guest connections, template builds and
// node registry.
type restHost struct{ s *Server }

var _ restapi.Host = restHost{}

func (h restHost) Authenticate(next http.HandlerFunc) http.HandlerFunc { return h.s.authenticate(next) }

func (h restHost) Caller(ctx context.Context) service.Caller { return callerOf(ctx).service() }

func (h restHost) Instrument(pattern string, next http.Handler) http.Handler {
	return h.s.instrument(pattern, next)
}

func (h restHost) ObserveCreate(d time.Duration) { h.s.metrics.observeCreate(d) }

func (h restHost) ObserveExec(d time.Duration) { h.s.metrics.observeExec(d) }

func (h restHost) Guest(ctx context.Context, sb *sandbox.Sandbox, op capability.Op) (*restapi.Guest, error) {
	return h.s.guestFor(ctx, sb, op)
}

func (h restHost) OpenStream(sb *sandbox.Sandbox) (func(), error) {
	return h.s.streams.acquire(surfaceREST, sb.Tenant, sb.ID)
}

func (h restHost) PortTransport(sb *sandbox.Sandbox, port uint16) (http.RoundTripper, error) {
	return h.s.ingress.PortTransport(sb, port)
}

func (h restHost) EnsureTemplate(ctx context.Context, name, source string) error {
	return h.s.EnsureTemplate(ctx, name, source)
}

func (h restHost) DeleteTemplateOnNodes(ctx context.Context, name string) {
	h.s.deleteTemplateOnNodes(ctx, name)
}

func (h restHost) Nodes(ctx context.Context) ([]sandboxv1.Node, error) { return h.s.nodeList(ctx) }

func (h restHost) SetNodeState(ctx context.Context, id string, state store.NodeState) (sandboxv1.Node, error) {
	return h.s.setNodeState(ctx, id, state)
}

// newREST is the native REST API of s.
func (s *Server) newREST() *restapi.API {
	return restapi.New(restapi.Config{
		Service: s.svc, Credentials: s.creds, Store: s.store, Host: restHost{s}, Log: s.log,
		Listen: s.cfg.Listen, IngressDomain: s.ingressDomain(), MaxFileBytes: s.cfg.MaxFileBytes, UploadIdleTimeout: s.cfg.UploadIdleTimeout,
		DefaultEgress: s.cfg.DefaultEgress, Builtins: s.cfg.Builtins, Keyring: s.cfg.Keyring, KMS: s.cfg.KMS,
	})
}

func (h restHost) Metrics(ctx context.Context, sb *sandbox.Sandbox, start, end int64) ([]sandboxv1.Metric, error) {
	ms, err := h.s.e2bAPI.Metrics(ctx, sb, start, end)
	if err != nil {
		return nil, err
	}
	out := make([]sandboxv1.Metric, 0, len(ms))
	for _, m := range ms {
		out = append(out, sandboxv1.Metric{
			Time: m.Timestamp, CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct,
			MemUsedBytes: m.MemUsed, MemTotalBytes: m.MemTotal,
			DiskUsedBytes: m.DiskUsed, DiskTotalBytes: m.DiskTotal,
			SpanSeconds: m.Span().Seconds(),
		})
	}
	return out, nil
}
