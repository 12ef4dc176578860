// Package restapi is SPACE's native REST API, the /v1 surface of SPEC.md
// (api/sandbox/v1, described by api/sandbox/v1/openapi.json): its handlers
// decode a request, call the operations of internal/service and encode the
// answer; Idempotency-Key replays; and errors become HTTP statuses here
// (WriteError, over the one table of internal/apierr).
//
// It is an adapter over internal/service, composed by internal/server,
// which gives it what it needs of the control plane through Host: API key
// authentication, metrics, the connection to a sandbox's guest, template
// builds and the node registry. It imports no other adapter (e2bapi,
// ingress, nodefacing), and none imports it (internal/service's deps
// test).
//
// The tenants, API keys, templates and idempotency records have no typed
// operations in internal/service yet: their handlers read and write the
// store (Config.Store) themselves.
package restapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/kms/localkms"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// Host is what the REST API uses of the control plane that serves it
// besides the operations. internal/server implements it.
type Host interface {
	// Authenticate runs next for a request carrying a valid API key in
	// Authorization: Bearer, and answers the others itself.
	Authenticate(next http.HandlerFunc) http.HandlerFunc
	// Caller is the caller Authenticate put in ctx.
	Caller(ctx context.Context) service.Caller
	// Instrument counts and times the requests h serves under pattern.
	Instrument(pattern string, h http.Handler) http.Handler
	// ObserveCreate and ObserveExec record how long a create and a
	// completed exec took.
	ObserveCreate(d time.Duration)
	ObserveExec(d time.Duration)
	// Guest connects to the guest daemon of sandbox sb for operations op,
	// waking a sandbox that idles (*sb becomes the woken record); a
	// sandbox that is not running is Conflict.
	Guest(ctx context.Context, sb *sandbox.Sandbox, op capability.Op) (*Guest, error)
	// OpenStream takes one of sandbox sb's stream slots, and one of its
	// tenant's, for a long-lived guest operation (an exec, a watch, a file
	// transfer) until release is called; past the per-sandbox or the
	// per-tenant cap it is refused with errdefs.ErrTooManyStreams.
	OpenStream(sb *sandbox.Sandbox) (release func(), err error)
	// PortTransport carries HTTP requests (addressed to http://port/…) to
	// port of sb's current execution through its node, as ingress does.
	PortTransport(sb *sandbox.Sandbox, port uint16) (http.RoundTripper, error)
	// EnsureTemplate queues the build of recorded template name from
	// source unless it is ready or building.
	EnsureTemplate(ctx context.Context, name, source string) error
	// DeleteTemplateOnNodes removes template name from the nodes, best
	// effort.
	DeleteTemplateOnNodes(ctx context.Context, name string)
	// Nodes lists the registered nodes as the API reports them.
	Nodes(ctx context.Context) ([]sandboxv1.Node, error)
	// SetNodeState drains (store.NodeDraining) or undrains
	// (store.NodeReady) registered node id and returns it; an unknown id
	// is NotFound.
	SetNodeState(ctx context.Context, id string, state store.NodeState) (sandboxv1.Node, error)
	// Metrics returns sandbox sb's use from second start to second end
	// (unix seconds, both included), oldest first: the samples kept over
	// its life, and one taken now when the window holds the present and
	// it runs.
	Metrics(ctx context.Context, sb *sandbox.Sandbox, start, end int64) ([]sandboxv1.Metric, error)
}

// Config is what New needs.
type Config struct {
	Service     *service.Sandboxes
	Credentials *service.Credentials
	// Store holds what has no operations in internal/service yet: tenants,
	// API keys, templates, idempotency records.
	Store store.Store
	Host  Host
	Log   *slog.Logger
	// Listen is the API's address, for the URLs of exposed ports when a
	// request names no host.
	Listen string
	// IngressDomain is the domain of the host names that reach sandbox
	// ports ({port}-{id}.{domain}).
	IngressDomain string
	// MaxFileBytes bounds one file upload.
	MaxFileBytes int64
	// UploadIdleTimeout bounds the wait for the next byte of an upload's
	// body (0: 60 s): a body that stalls (a Content-Length larger than what
	// is sent, a client gone silent) is refused, not waited on forever.
	UploadIdleTimeout time.Duration
	// DefaultEgress is the policy reported for a sandbox without its own.
	DefaultEgress *egress.Policy
	// Builtins are the template sources known by name ("minimal").
	Builtins map[string]string
	// Keyring, when set, is the capability signing keys the admin API
	// lists and rotates; nil: a fixed key, and those routes refuse.
	Keyring *capability.Keyring
	// KMS holds the tenants' encryption keys (listed and revoked through
	// the admin API); nil: those routes refuse.
	KMS *localkms.KMS
}

// API serves the native REST API.
type API struct {
	cfg   Config
	svc   *service.Sandboxes
	creds *service.Credentials
	store store.Store
	host  Host
	log   *slog.Logger
}

// New returns the REST API of cfg.
func New(cfg Config) *API {
	if cfg.UploadIdleTimeout == 0 {
		cfg.UploadIdleTimeout = 60 * time.Second
	}
	return &API{cfg: cfg, svc: cfg.Service, creds: cfg.Credentials, store: cfg.Store, host: cfg.Host, log: cfg.Log}
}

// Mux is where Register adds the routes.
type Mux interface {
	Handle(pattern string, h http.Handler)
}

// ErrAdminOnly refuses a request that needs the admin key.
var ErrAdminOnly = fmt.Errorf("%w: this needs the admin key", errdefs.ErrPermissionDenied)

// Register adds the REST API's routes to mux: /openapi.json and /v1/…
// but the ports' proxy and TCP routes, which are ingress's.
func (a *API) Register(mux Mux) {
	route := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, a.host.Instrument(pattern, h)) }
	authed := func(pattern string, h http.HandlerFunc) { route(pattern, a.host.Authenticate(h)) }
	admin := func(pattern string, h http.HandlerFunc) { route(pattern, a.host.Authenticate(a.requireAdmin(h))) }

	route("GET /openapi.json", handleOpenAPI)

	authed("POST /v1/sandboxes", a.idempotent(a.handleCreate))
	authed("GET /v1/sandboxes", a.handleList)
	authed("GET /v1/sandboxes/{id}", a.handleGet)
	authed("DELETE /v1/sandboxes/{id}", a.handleDelete)
	authed("POST /v1/sandboxes/{id}/exec", a.handleExec)
	authed("GET /v1/sandboxes/{id}/exec", a.handleExecStream)
	authed("GET /v1/sandboxes/{id}/processes", a.handleListProcesses)
	authed("POST /v1/sandboxes/{id}/code", a.handleRunCode)
	authed("GET /v1/sandboxes/{id}/code/contexts", a.handleListCodeContexts)
	authed("POST /v1/sandboxes/{id}/code/contexts", a.handleCreateCodeContext)
	authed("POST /v1/sandboxes/{id}/code/contexts/{context}/restart", a.handleRestartCodeContext)
	authed("DELETE /v1/sandboxes/{id}/code/contexts/{context}", a.handleDeleteCodeContext)
	authed("GET /v1/sandboxes/{id}/files", a.handleReadFile)
	authed("PUT /v1/sandboxes/{id}/files", a.handleWriteFile)
	authed("DELETE /v1/sandboxes/{id}/files", a.handleRemoveFile)
	authed("GET /v1/sandboxes/{id}/files/list", a.handleListFiles)
	authed("GET /v1/sandboxes/{id}/files/stat", a.handleStatFile)
	authed("POST /v1/sandboxes/{id}/files/mkdir", a.handleMkdir)
	authed("POST /v1/sandboxes/{id}/files/move", a.handleMove)
	authed("GET /v1/sandboxes/{id}/files/watch", a.handleWatch)
	authed("POST /v1/sandboxes/{id}/pause", a.handleLifecycle(sandbox.OpPause))
	authed("POST /v1/sandboxes/{id}/resume", a.handleLifecycle(sandbox.OpResume))
	authed("POST /v1/sandboxes/{id}/timeout", a.handleSetTimeout)
	authed("GET /v1/sandboxes/{id}/egress", a.handleGetEgress)
	authed("PUT /v1/sandboxes/{id}/egress", a.handleSetEgress)
	authed("POST /v1/sandboxes/{id}/stop", a.handleLifecycle(sandbox.OpStop))
	authed("POST /v1/sandboxes/{id}/start", a.handleStart)
	authed("POST /v1/sandboxes/{id}/rollback", a.handleRollback)
	authed("POST /v1/sandboxes/{id}/fork", a.idempotent(a.handleFork))
	authed("POST /v1/sandboxes/{id}/hibernate", a.handleLifecycle(sandbox.OpHibernate))
	authed("POST /v1/sandboxes/{id}/restore", a.handleRestore)
	authed("POST /v1/sandboxes/{id}/ports", a.handleExposePort)
	authed("GET /v1/sandboxes/{id}/ports", a.handleListPorts)
	authed("DELETE /v1/sandboxes/{id}/ports/{port}", a.handleUnexposePort)
	authed("GET /v1/sandboxes/{id}/snapshots", a.handleListSnapshots)
	authed("POST /v1/sandboxes/{id}/snapshots", a.idempotent(a.handleCreateSnapshot))
	authed("DELETE /v1/sandboxes/{id}/snapshots/{snapshot}", a.handleDeleteSnapshot)
	authed("GET /v1/sandboxes/{id}/events", a.handleEvents)
	authed("GET /v1/sandboxes/{id}/metrics", a.handleMetrics)
	authed("GET /v1/sandboxes/{id}/ca.pem", a.handleGetCA)

	authed("POST /v1/credentials", a.idempotent(a.handleCreateCredential))
	authed("GET /v1/credentials", a.handleListCredentials)
	authed("GET /v1/credentials/audit", a.handleCredentialAudit)
	authed("GET /v1/credentials/{id}", a.handleGetCredential)
	authed("DELETE /v1/credentials/{id}", a.handleDeleteCredential)

	authed("GET /v1/templates", a.handleListTemplates)
	admin("POST /v1/templates", a.idempotent(a.handleBuildTemplate))
	admin("DELETE /v1/templates/{name}", a.handleDeleteTemplate)
	admin("PUT /v1/templates/{name}/egress", a.handleSetTemplateEgress)

	admin("GET /v1/tenants", a.handleListTenants)
	admin("POST /v1/tenants", a.idempotent(a.handleCreateTenant))
	admin("DELETE /v1/tenants/{id}", a.handleDeleteTenant)
	admin("PUT /v1/tenants/{id}/quota", a.handleSetQuota)
	admin("GET /v1/nodes", a.handleListNodes)
	admin("POST /v1/nodes/{id}/drain", a.handleDrainNode)
	admin("POST /v1/nodes/{id}/undrain", a.handleUndrainNode)
	admin("GET /v1/signing-keys", a.handleListSigningKeys)
	admin("POST /v1/signing-keys/rotate", a.handleRotateSigningKey)
	admin("GET /v1/tenants/{id}/encryption-keys", a.handleListEncryptionKeys)
	admin("DELETE /v1/tenants/{id}/encryption-keys/{key}", a.handleRevokeEncryptionKey)
	authed("GET /v1/keys", a.handleListKeys)
	authed("POST /v1/keys", a.idempotent(a.handleCreateKey))
	authed("DELETE /v1/keys/{id}", a.handleRevokeKey)
}

// caller is the request's authenticated caller (Host.Caller).
func (a *API) caller(r *http.Request) service.Caller { return a.host.Caller(r.Context()) }

// requireAdmin runs next for the admin key only.
func (a *API) requireAdmin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !a.caller(r).Admin {
			a.writeError(w, r, ErrAdminOnly)
			return
		}
		next(w, r)
	}
}

// sandboxFor loads the request's {id} sandbox for the caller's tenant; another
// tenant's sandbox is NotFound, exactly like a missing one.
func (a *API) sandboxFor(r *http.Request) (*sandbox.Sandbox, error) {
	return a.svc.Get(r.Context(), a.caller(r), r.PathValue("id"))
}

// clip shortens a caller-supplied string for an error message.
func clip(s string) string { return service.Clip(s) }

func handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(sandboxv1.OpenAPI)
}

func (a *API) handleDrainNode(w http.ResponseWriter, r *http.Request) {
	a.setNodeState(w, r, store.NodeDraining)
}

func (a *API) handleUndrainNode(w http.ResponseWriter, r *http.Request) {
	a.setNodeState(w, r, store.NodeReady)
}

// setNodeState moves node {id} to state and answers with the node.
func (a *API) setNodeState(w http.ResponseWriter, r *http.Request, state store.NodeState) {
	n, err := a.host.SetNodeState(r.Context(), r.PathValue("id"), state)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, n)
}

// handleListNodes lists the registered nodes (admin).
func (a *API) handleListNodes(w http.ResponseWriter, r *http.Request) {
	nodes, err := a.host.Nodes(r.Context())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sandboxv1.NodeList{Nodes: nodes})
}
