// Package server is the wiring of SPACE's control plane: Config and New,
// the listener, API key authentication, the node registry the reconciler
// and the data path use (with the heartbeats internal/nodefacing hands
// in), drain, the guest connections, template builds, the MAC key, the CA
// sealer and the metrics. It composes the operations (internal/service)
// and the surfaces over them on one listener: the native REST API
// (internal/restapi), the E2B API (internal/e2bapi), ServicePort ingress
// (internal/ingress) and the node-facing API (internal/nodefacing), each
// given what it needs of the control plane through its Host
// (restapihost.go, e2bhost.go, ingresshost.go) or, for nodefacing, by
// Server's own methods.
package server

import (
	"context"
	"errors"
	"fmt"
	"github.com/spacesandbox/space/internal/scheduler"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/console"
	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/e2bapi"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/ingress"
	"github.com/spacesandbox/space/internal/kms/localkms"
	"github.com/spacesandbox/space/internal/nodefacing"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/restapi"
	"github.com/spacesandbox/space/internal/route"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// Config wires a control plane.
type Config struct {
	// Listen is the TCP address of the REST API.
	Listen string
	// JoinToken authenticates nodes registering and heartbeating.
	JoinToken string
	// DefaultRuntime is used when a create request names none: "vm",
	// "ns", or "auto" (vm wherever a node offers it or is bringing it up;
	// see RuntimeFallback for when none does).
	DefaultRuntime string
	// RuntimeFallback is the runtime a create that names none gets under
	// "auto" when no live node offers vm or is bringing it up: "" refuses
	// such a create (never a silent downgrade), "ns" runs it on ns with an
	// event saying so.
	RuntimeFallback string
	// MemoryOvercommit lets the sandboxes' memory limits on a node sum to
	// this many times its memory (<= 1: no overcommit).
	MemoryOvercommit float64
	// CPUOvercommit lets the sandboxes' CPUs on a node sum to this many
	// times its CPUs (<= 0: scheduler.DefaultCPUOvercommit).
	CPUOvercommit int
	// WarmupWait bounds how long a create waits for its template to finish
	// building and for its runtime to come up on a live node (0: 10m).
	WarmupWait time.Duration
	// MaxFileBytes bounds one file upload.
	MaxFileBytes int64
	// UploadIdleTimeout bounds the wait for the next byte of an upload's
	// body (0: 60 s).
	UploadIdleTimeout time.Duration
	// E2BFilesDir keeps the COPY sources that E2B template builds upload
	// (internal/e2bapi tplfiles.go); "" refuses those uploads.
	E2BFilesDir string
	// PublicURL is the API's address as clients reach it
	// (scheme://host[:port]); "": links are built on each request's Host
	// header.
	PublicURL string
	// MaxSandboxStreams bounds the guest streams one sandbox may have open
	// at the API at once (0: DefaultMaxSandboxStreams; streams.go).
	MaxSandboxStreams int
	// MaxTenantStreams bounds the streams one tenant may have open at the
	// API at once across all its sandboxes, TCP port tunnels included (0:
	// DefaultMaxTenantStreams; streams.go).
	MaxTenantStreams int
	// CreateTimeout bounds how long POST /v1/sandboxes waits for running.
	CreateTimeout time.Duration
	// Builtins are the template sources the server knows by name ("minimal").
	Builtins map[string]string
	// Signer mints the capabilities that bind each request to the exact
	// execution that may serve it; Keys is the bundle nodes verify them with.
	Signer *capability.Signer
	Keys   *capability.KeySet
	// Keyring, when set, replaces Signer and Keys: its signing key can be
	// rotated through the admin API.
	Keyring *capability.Keyring
	// KMS holds the tenants' encryption keys (listed and revoked through
	// the admin API).
	KMS *localkms.KMS
	// DefaultEgress is the egress policy of a sandbox created without one,
	// and of the sandboxes recorded before sandboxes had policies (New hands
	// it to the reconciler for those). nil: sandbox.DefaultEgress, the
	// public internet only.
	DefaultEgress *egress.Policy
	// Credentials resolves credentials for the nodes' gateways,
	// CredentialStore is its backend (where POST /v1/credentials writes)
	// and CredentialAudit its audit log, read back by GET
	// /v1/credentials/audit. nil: the credential routes answer 503.
	Credentials     *credentials.Manager
	CredentialStore credentials.Backend
	CredentialAudit AuditReader
	// CASealer seals each sandbox's interception CA key at rest (ca.go).
	// nil: sandboxes get no CA, and no credential is injected.
	CASealer *CASealer
	// IngressDomain is the domain of the host names that reach exposed
	// sandbox ports: {port}-{sandbox}.{IngressDomain} on the API's
	// listener. "": DefaultIngressDomain (localhost).
	IngressDomain string
	// WarmPools are the prepared executions every node keeps ready per
	// template, runtime and size (warmpool.go).
	WarmPools []WarmPool
	// Internal names the deployment's own services besides those the
	// control plane learns by itself; no sandbox reaches any of them
	// (internalnet.go).
	Internal InternalConfig
	// MetricsToken, when set, is a bearer token that reads GET /metrics
	// without an API key (a Prometheus scraper's). Admin keys always may;
	// tenant keys and anonymous requests never (metricsauth.go).
	MetricsToken string
}

// Server serves the REST API.
type Server struct {
	cfg Config
	// apiAddr is the listener's loopback address (host:port) once Run
	// opened it: where E2B template builds reach the public API.
	apiAddr atomic.Pointer[string]
	log     *slog.Logger
	store   store.Store
	nodes   *Nodes
	rec     *reconcile.Reconciler
	// svc is the operations on sandboxes every surface calls, creds those
	// on credentials.
	svc     *service.Sandboxes
	creds   *service.Credentials
	metrics *metrics
	// streams caps each sandbox's open guest streams (streams.go).
	streams *streamLimiter
	// routes caches where each sandbox's guest requests go.
	routes *route.Cache

	templateJobs chan templateJob
	// e2b holds the server's MAC key (mackey.go).
	e2b e2bTokens
	// rest is the native REST API (restapihost.go), e2bAPI the E2B
	// surface (e2bhost.go), ingress ServicePort ingress (ingresshost.go).
	rest    *restapi.API
	e2bAPI  *e2bapi.API
	ingress *ingress.Ingress
	// internal is the internal-service list sent to nodes (internalnet.go).
	internal *internalServices
}

// New returns a server over st. The reconciler drives what the API records.
func New(cfg Config, st store.Store, nodes *Nodes, rec *reconcile.Reconciler, log *slog.Logger) *Server {
	if cfg.MaxFileBytes == 0 {
		cfg.MaxFileBytes = 10 << 30
	}
	if cfg.CreateTimeout == 0 {
		cfg.CreateTimeout = 5 * time.Minute
	}
	if cfg.WarmupWait == 0 {
		cfg.WarmupWait = DefaultWarmupWait
	}
	if cfg.DefaultEgress == nil {
		cfg.DefaultEgress = sandbox.DefaultEgress()
	}
	s := &Server{cfg: cfg, log: log, store: st, nodes: nodes, rec: rec, metrics: newMetrics(), streams: newStreamLimiter(cfg.MaxSandboxStreams, cfg.MaxTenantStreams), routes: &route.Cache{Margin: 10 * time.Second}, templateJobs: make(chan templateJob, 64), internal: newInternalServices(cfg.Internal)}
	svc := service.Config{
		DefaultRuntime: cfg.DefaultRuntime, RuntimeFallback: cfg.RuntimeFallback, WarmupWait: cfg.WarmupWait,
		Overcommit:    scheduler.Overcommit{Ratio: cfg.MemoryOvercommit, CPURatio: cfg.CPUOvercommit},
		CreateTimeout: cfg.CreateTimeout, DefaultEgress: cfg.DefaultEgress, Egress: egressNodes{nodes},
	}
	if cfg.CASealer != nil {
		svc.CAKeys = cfg.CASealer
	}
	// The server's start is the control plane's: creates wait for a first
	// node only while it warms up.
	s.svc = service.New(svc, st, rec, nodes, time.Now(), log)
	s.creds = service.NewCredentials(st, cfg.CredentialStore, cfg.CredentialAudit, log)
	s.rest = s.newREST()
	s.e2bAPI = s.newE2B()
	s.ingress = s.newIngress()
	s.internal.nodeAddrs = s.registeredNodeAddrs
	s.internal.shareReplicaAddresses(st)
	if rec != nil {
		rec.SetDefaultEgress(cfg.DefaultEgress)
		if cfg.CASealer != nil {
			rec.SetCA(s.svc.StartCA)
		}
		rec.SetOnDelete(s.creds.PurgeHeaderRules)
	}
	return s
}

// Handler returns the API's HTTP handler.
func (s *Server) Handler() http.Handler {
	h, _ := s.handler()
	return h
}

// routeMux is the API's mux, remembering every pattern registered on it, so
// that the authorization matrix (authz_test.go) can hold each route the
// server serves against its row: a route without one fails the test.
type routeMux struct {
	*http.ServeMux
	patterns []string
}

// Handle registers h for pattern and records the pattern.
func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

// HandleFunc registers f for pattern and records the pattern.
func (m *routeMux) HandleFunc(pattern string, f func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(f))
}

// handler builds the API's handler and returns it with every pattern its
// mux serves.
func (s *Server) handler() (http.Handler, []string) {
	mux := &routeMux{ServeMux: http.NewServeMux()}
	route := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, s.instrument(pattern, h)) }
	admin := func(pattern string, h http.HandlerFunc) { route(pattern, s.authenticate(s.requireAdmin(h))) }

	route("GET /healthz", s.handleHealth)
	route("GET /readyz", s.handleReady)
	route("GET /metrics", s.metricsAuth(s.handleMetrics))
	// The nodes' side of the node API (internal/nodefacing), and the
	// refusal of nodes that still speak its v1.
	nodes := nodefacing.New(s, s.log)
	route("POST "+nodefacing.Path, nodes.ServeHTTP)
	route("POST /internal/v1/nodes/{id}/heartbeat", nodes.V1Heartbeat)
	route("POST /internal/v1/nodes/{node}/credentials/resolve", nodes.V1ResolveCredential)

	s.rest.Register(mux)
	// Ingress authenticates itself: public ports need nothing, private
	// ones the API key or the port's token (internal/ingress).
	route("/v1/sandboxes/{id}/ports/{port}/proxy/{rest...}", s.ingress.HandlePath)
	route("GET /v1/sandboxes/{id}/ports/{port}/tcp", s.ingress.HandleTCP)
	s.registerPprof(admin)
	s.e2bAPI.Register(mux)
	// The web console (docs/console.md): static assets, public; it signs
	// in with an API key in the browser and uses the REST API above.
	mux.Handle("GET "+console.Path+"/", console.Handler())

	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, fmt.Errorf("%w: no route %s %s", errdefs.ErrNotFound, r.Method, r.URL.Path))
	})
	return s.e2bAPI.WithData(s.ingress.Wrap(mux)), mux.patterns
}

// apiProtocols are what the API listener speaks: HTTP/1.1, and HTTP/2
// without TLS by prior knowledge (h2c) — gRPC and Connect clients (the E2B
// SDKs' envd calls among them) use it on plain-HTTP origins. A TLS
// terminator in front negotiates its own.
func apiProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// Run serves the API on cfg.Listen until ctx is done. ready, when not nil, is
// called with the bound address once the listener is open.
func (s *Server) Run(ctx context.Context, ready func(addr string)) error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("server: listen %s: %w", s.cfg.Listen, err)
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		Protocols:         apiProtocols(),
	}
	// The internal-service list re-resolves its names while the API
	// serves, and stops with it.
	s.internal.setListener(ln.Addr())
	apiAddr := loopbackAddr(ln.Addr())
	s.apiAddr.Store(&apiAddr)
	rctx, stopResolving := context.WithCancel(ctx)
	resolved := make(chan struct{})
	defer func() { stopResolving(); <-resolved }()
	go func() {
		defer close(resolved)
		s.internal.run(rctx)
	}()
	// The E2B metrics history samples the running sandboxes while the
	// API serves.
	sampled := make(chan struct{})
	defer func() { stopResolving(); <-sampled }()
	go func() {
		defer close(sampled)
		s.e2bAPI.RunMetrics(rctx)
	}()
	// The sweep of E2B template builds whose server died removes their
	// sandboxes through the API, so it runs while the API serves.
	swept := make(chan struct{})
	defer func() { stopResolving(); <-swept }()
	go func() {
		defer close(swept)
		s.e2bAPI.RunBuildSweep(rctx)
	}()
	go func() {
		<-ctx.Done()
		// The E2B template builds remove their sandboxes through the API,
		// so they stop before it does.
		s.e2bAPI.StopBuilds()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if ready != nil {
		ready(ln.Addr().String())
	}
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if _, err := s.store.ListNodes(ctx); err != nil {
		s.writeError(w, r, fmt.Errorf("%w: database: %v", errdefs.ErrUnavailable, err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
