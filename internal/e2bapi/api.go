// Package e2bapi is SPACE's E2B compatibility surface: the unmodified `e2b`
// SDKs work against SPACE (docs/e2b.md). It is an adapter over
// internal/service, composed by internal/server, which gives it what it
// needs of the control plane through Host; it imports no other adapter.
//
// Two surfaces, both on the API listener:
//
//   - the REST API under /e2b (E2B_API_URL=http://HOST:PORT/e2b): E2B's
//     paths, JSON field names, status codes and {code, message} errors,
//     each call mapped onto SPACE's own lifecycle by calling the operations
//     of internal/service, as the /v1 handlers of internal/restapi do;
//   - the data plane at the listener's root (E2B_SANDBOX_URL=http://HOST:PORT):
//     requests carrying E2b-Sandbox-Id / E2b-Sandbox-Port, or sent to the
//     host name 49983-{id}.{ingress domain}, go to the sandbox's guest daemon,
//     which speaks envd's protocol (proxy.go); other ports go to the
//     sandbox's HTTP services, public by default as on E2B
//     (traffic.go).
//
// Authentication: the REST API takes SPACE's own API keys in E2B's
// X-API-Key header (or SPACE's Authorization: Bearer), so the admin key
// works unchanged as E2B_API_KEY. SPACE keys are not e2b_<hex>-shaped; the
// e2b SDKs up to 2.51 do not check the shape, and those that do accept
// E2B_VALIDATE_API_KEY=false. Keys are not reshaped to e2b_<hex> because
// the key id inside a SPACE key is what finds its row without a scan.
//
// The data plane takes envd's X-Access-Token (the envdAccessToken every
// create, connect and fork answers). It is a MAC, not a stored secret:
// HMAC-SHA256 under the server key (Config.TokenKey) of a label and the sandbox id.
// A MAC rather than a hashed random token because Sandbox.connect(id), from
// any process, must be answered with the token again, and a hash cannot be
// turned back into it. It is bound to the sandbox id and not to the
// execution generation: the SDK keeps the token of its create for the
// sandbox's life (a paused and resumed sandbox keeps its token in E2B too),
// and ids are never reused, so a token opens exactly one sandbox, ever.
// The trafficAccessToken of a sandbox with private ports is made the same
// way under another label.
package e2bapi

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/imagebuild"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// Host is what the E2B surface uses of the control plane that serves it
// besides the operations: authentication, metrics, error statuses, the
// guest and node connections, and SPACE's own ingress (for the ports
// that are not envd's). internal/server implements it.
type Host interface {
	// Authenticate runs next for a request carrying a valid SPACE API key
	// in Authorization: Bearer, and answers the others itself.
	Authenticate(next http.HandlerFunc) http.HandlerFunc
	// Caller is the caller Authenticate put in ctx.
	Caller(ctx context.Context) service.Caller
	// Instrument counts and times the requests h serves under pattern.
	Instrument(pattern string, h http.Handler) http.Handler
	// Status is the HTTP status SPACE answers err with.
	Status(err error) int
	// ObserveCreate records how long a create took.
	ObserveCreate(d time.Duration)
	// GuestTransport carries requests to the guest daemon of running
	// sandbox sb for operations op (waking one that idles); the request's
	// host is ignored.
	GuestTransport(ctx context.Context, sb *sandbox.Sandbox, op capability.Op) (http.RoundTripper, error)
	// OpenStream takes one of sandbox sb's stream slots, and one of its
	// tenant's, for an envd request until release is called; past the
	// per-sandbox or the per-tenant cap it is refused with
	// errdefs.ErrTooManyStreams.
	OpenStream(sb *sandbox.Sandbox) (release func(), err error)
	// ReadGuestFile reads at most limit bytes of file path in sb's guest
	// as user.
	ReadGuestFile(ctx context.Context, sb *sandbox.Sandbox, path, user string, limit int64) ([]byte, error)
	// Node is node id's client, waiting a little for a node that is
	// reconnecting.
	Node(ctx context.Context, id string) (NodeStats, error)
	// ServeIngressHTTP serves r as SPACE's ingress does, for port of
	// sandbox id at path.
	ServeIngressHTTP(w http.ResponseWriter, r *http.Request, id string, port int, path string)
	// BuildBackend is what a template build of r's caller runs on:
	// SPACE's public API as that caller, with its authorization.
	BuildBackend(r *http.Request) (imagebuild.Backend, error)
}

// NodeStats measures a node's executions.
type NodeStats interface {
	Stats(ctx context.Context, exec string) (*nodev1.ExecStats, error)
}

// Config is what New needs.
type Config struct {
	Service *service.Sandboxes
	// Credentials keeps network.rules as sandbox-scoped credentials
	// (rules.go).
	Credentials *service.Credentials
	Host        Host
	// TokenKey is the MAC key of the envd and traffic access tokens and of
	// the page tokens: derived from the control plane's persistent secret,
	// so that they survive restarts and agree across replicas.
	TokenKey []byte
	// IngressDomain is the domain of the host names that reach sandbox
	// ports ({port}-{id}.{domain}).
	IngressDomain string
	Log           *slog.Logger
	// MaxFileBytes bounds one envd /files upload (0: 10 GiB), as the REST
	// API's file limit.
	MaxFileBytes int64
	// UploadIdleTimeout bounds the wait for the next byte of an upload's
	// body (0: 60 s).
	UploadIdleTimeout time.Duration
	// FilesDir keeps the template builds' uploaded COPY sources
	// (tplfiles.go); "" refuses uploads.
	FilesDir string
	// MaxUploadBytes bounds one such upload (0: 1 GiB).
	MaxUploadBytes int64
	// MaxTenantUploads and MaxTenantUploadBytes bound the uploads one
	// tenant keeps (0: 256 and 8 GiB); UploadMaxAge is how long one no
	// build uses is kept (0: 24 h). tplquota.go.
	MaxTenantUploads     int
	MaxTenantUploadBytes int64
	UploadMaxAge         time.Duration
	// PublicURL, when not "", is the API's own address as clients reach
	// it (scheme://host[:port], ParsePublicURL): the links the API hands
	// out (template upload urls) are built on it instead of on the
	// request's Host header.
	PublicURL string
	// Metrics keeps the metrics history across restarts and replicas
	// (historystore.go); nil keeps it in this process only.
	Metrics store.MetricHistory
	// Builds records the template builds across restarts and replicas
	// (tplrecords.go); nil keeps them in this process only, and a
	// template name is then never rebuilt.
	Builds store.TemplateBuilds
}

// API serves the E2B REST API and data plane.
type API struct {
	svc    *service.Sandboxes
	creds  *service.Credentials
	host   Host
	key    []byte
	domain string
	log    *slog.Logger
	// maxFile and uploadIdle bound envd /files uploads (Config).
	maxFile    int64
	uploadIdle time.Duration
	// history is every sandbox's metrics series (history.go).
	history *metricsHistory
	// builds are the template builds (tplbuild.go); filesDir and
	// maxUpload keep and bound their uploads (Config).
	builds   *templateBuilds
	filesDir string
	// publicURL is Config.PublicURL.
	publicURL string
	maxUpload int64
	// uploads bounds each tenant's kept uploads (tplquota.go).
	uploads *uploadKeeper
}

// New returns the E2B surface of cfg.
func New(cfg Config) *API {
	if cfg.MaxFileBytes == 0 {
		cfg.MaxFileBytes = 10 << 30
	}
	if cfg.UploadIdleTimeout == 0 {
		cfg.UploadIdleTimeout = 60 * time.Second
	}
	if cfg.MaxUploadBytes == 0 {
		cfg.MaxUploadBytes = 1 << 30
	}
	history := newMetricsHistory(MetricsEvery, MetricsKeep)
	history.store = cfg.Metrics
	builds := newTemplateBuilds()
	builds.st = cfg.Builds
	if cfg.Log != nil {
		builds.logger = cfg.Log
	}
	if cfg.Service != nil {
		builds.deleteSandbox = func(ctx context.Context, tenant, id string) error {
			return cfg.Service.Delete(ctx, service.Caller{Tenant: tenant}, id)
		}
	}
	return &API{svc: cfg.Service, creds: cfg.Credentials, host: cfg.Host, key: cfg.TokenKey, domain: cfg.IngressDomain, log: cfg.Log,
		maxFile: cfg.MaxFileBytes, uploadIdle: cfg.UploadIdleTimeout, history: history,
		builds: builds, filesDir: cfg.FilesDir, maxUpload: cfg.MaxUploadBytes,
		uploads:   newUploadKeeper(uploadBounds{count: cfg.MaxTenantUploads, bytes: cfg.MaxTenantUploadBytes, age: cfg.UploadMaxAge}),
		publicURL: strings.TrimSuffix(cfg.PublicURL, "/")}
}

// Mux is where Register adds the routes.
type Mux interface {
	Handle(pattern string, h http.Handler)
}

// sandboxFor loads the request's {id} sandbox for the caller (service.Sandboxes.Get).
func (a *API) sandboxFor(r *http.Request) (*sandbox.Sandbox, error) {
	return a.svc.Get(r.Context(), a.host.Caller(r.Context()), r.PathValue("id"))
}

// PathPrefix is the path of the E2B REST API on the API listener:
// E2B_API_URL is the API URL with it.
const PathPrefix = "/e2b"

// EnvdPort is the port the E2B SDKs address the guest daemon (envd) by.
const EnvdPort = 49983

// EnvdVersion is the envdVersion the REST API reports: the guest
// daemon's (guestd.Version; a test keeps them equal), above every version
// gate of the current SDKs (0.6.4 is the last they check).
const EnvdVersion = "0.7.0"

// Register adds the E2B REST API to mux, under PathPrefix.
func (a *API) Register(mux Mux) {
	route := func(pattern string, h http.HandlerFunc) {
		method, path, _ := strings.Cut(pattern, " ")
		full := method + " " + PathPrefix + path
		mux.Handle(full, a.host.Instrument(full, a.e2bErrors(a.e2bAuth(h))))
	}
	mux.Handle("GET "+PathPrefix+"/health", a.host.Instrument("GET /e2b/health", http.HandlerFunc(a.handleE2BHealth)))

	route("POST /sandboxes", a.handleE2BCreate)
	route("POST /v2/sandboxes", a.handleE2BCreate)
	route("GET /sandboxes", a.handleE2BListV1)
	route("GET /v2/sandboxes", a.handleE2BList)
	route("GET /sandboxes/{id}", a.handleE2BGet)
	route("DELETE /sandboxes/{id}", a.handleE2BKill)
	route("POST /sandboxes/{id}/timeout", a.handleE2BTimeout)
	route("POST /sandboxes/{id}/refreshes", a.handleE2BRefresh)
	route("POST /sandboxes/{id}/pause", a.handleE2BPause)
	route("POST /sandboxes/{id}/connect", a.handleE2BConnect)
	route("POST /v2/sandboxes/{id}/connect", a.handleE2BConnect)
	route("POST /sandboxes/{id}/resume", a.handleE2BResume)
	route("GET /sandboxes/{id}/metrics", a.handleE2BMetrics)
	route("POST /sandboxes/{id}/snapshots", a.handleE2BCreateSnapshot)
	route("GET /snapshots", a.handleE2BListSnapshots)
	route("DELETE /templates/{id}", a.handleE2BDeleteSnapshot)
	route("POST /sandboxes/{id}/fork", a.handleE2BFork)
	route("PUT /sandboxes/{id}/network", a.handleE2BUpdateNetwork)
	route("POST /v3/templates", a.handleTemplateRequest)
	route("GET /templates/aliases/{alias}", a.handleTemplateAlias)
	route("GET /templates/{templateID}/{sub}", a.handleTemplateSub)
	route("POST /templates/tags", a.handleAssignTags)
	route("GET /templates/{templateID}/files/{hash}", a.handleTemplateFiles)
	route("POST /v2/templates/{templateID}/builds/{buildID}", a.handleTemplateBuild)
	route("GET /templates/{templateID}/builds/{buildID}/status", a.handleTemplateBuildStatus)
	// An upload is authorized by its url's MAC, not by a key (tplfiles.go).
	upload := "PUT " + PathPrefix + "/template-files/{tenant}/{hash}"
	mux.Handle(upload, a.host.Instrument(upload, a.e2bErrors(http.HandlerFunc(a.handleTemplateFilesPut))))
	for _, l := range e2bLacking {
		full := e2bLackingPattern(l.pattern)
		mux.Handle(full, a.host.Instrument(full, a.e2bErrors(a.e2bAuth(a.e2bLacks(l.feature)))))
	}
	mux.Handle(PathPrefix+"/", a.e2bErrors(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeE2BError(w, http.StatusNotFound, "no E2B route "+r.Method+" "+service.Clip(r.URL.Path)+" (docs/e2b.md lists what SPACE implements)")
	})))
}

func (a *API) handleE2BHealth(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("Health check successful"))
}

// e2bAuth authenticates an E2B request with the SPACE API key it carries
// in X-API-Key (E2B's header), else in Authorization: Bearer.
func (a *API) e2bAuth(next http.HandlerFunc) http.HandlerFunc {
	auth := a.host.Authenticate(next)
	return func(w http.ResponseWriter, r *http.Request) {
		if key := strings.TrimSpace(r.Header.Get("X-API-Key")); key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		auth(w, r)
	}
}

// maxJSONBody bounds a JSON request body.
const maxJSONBody = 1 << 20

// tooLargeError is a body over its bound; SPACE answers it 413, as the
// *http.MaxBytesError it wraps.
type tooLargeError struct {
	limit int64
	err   error
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("too large: body is over %d bytes", e.limit)
}

func (e *tooLargeError) Unwrap() error { return e.err }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// e2bError is E2B's error body.
type e2bError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeE2BError(w http.ResponseWriter, status int, msg string) {
	setRetryAfter(w.Header(), status)
	writeJSON(w, status, e2bError{Code: status, Message: msg})
}

// writeE2BErr answers err the E2B way: SPACE's status, E2B's body.
func (a *API) writeE2BErr(w http.ResponseWriter, r *http.Request, err error) {
	e := a.e2bErrorOf(r, err)
	setRetryAfter(w.Header(), e.Code)
	writeJSON(w, e.Code, e)
}

// e2bErrorOf is err as E2B's error body: the status SPACE answers it with
// as the code, and the message writeError would show (an internal error's
// causes logged, not shown).
func (a *API) e2bErrorOf(r *http.Request, err error) e2bError {
	status := a.host.Status(err)
	msg := err.Error()
	if status == http.StatusInternalServerError {
		a.log.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		msg = "internal error; the server log has the details"
	}
	return e2bError{Code: status, Message: msg}
}

// e2bErrors rewrites SPACE error bodies ({"code": "not_found", ...}) that
// the handlers it wraps write into E2B's ({"code": 404, ...}): the SDKs
// branch on the numeric code field.
func (a *API) e2bErrors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ew := &e2bErrorWriter{ResponseWriter: w}
		next.ServeHTTP(ew, r)
		ew.finish()
	})
}

// e2bErrorWriter passes successful answers through and holds back error
// answers until finish converts them.
type e2bErrorWriter struct {
	http.ResponseWriter
	status int
	held   bytes.Buffer
}

func (w *e2bErrorWriter) WriteHeader(status int) {
	if w.status != 0 {
		return
	}
	w.status = status
	if status < 400 {
		w.ResponseWriter.WriteHeader(status)
	}
}

func (w *e2bErrorWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.status >= 400 {
		if w.held.Len() < maxJSONBody {
			w.held.Write(p)
		}
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

func (w *e2bErrorWriter) finish() {
	if w.status < 400 {
		return
	}
	w.ResponseWriter.Header().Del("Content-Length")
	setRetryAfter(w.ResponseWriter.Header(), w.status)
	writeJSON(w.ResponseWriter, w.status, e2bErrorBody(w.status, w.held.Bytes()))
}

// e2bErrorBody converts an error body to E2B's shape: the message kept, the
// code the HTTP status.
func e2bErrorBody(status int, body []byte) e2bError {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) != nil || e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e2bError{Code: status, Message: e.Message}
}

// e2bTokenLabel separates the envd access token from any other MAC under
// the same key.
const e2bTokenLabel = "space e2b envd access token v1\x00"

// e2bMAC is the token of sandbox id for purpose label: hex
// HMAC-SHA256(key, label || id). The labels end with a NUL, which no
// sandbox id contains, so no label-and-id pair reads as another.
func (a *API) e2bMAC(label, id string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(label))
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

// AccessToken is the envdAccessToken of sandbox id.
func (a *API) AccessToken(id string) string { return a.e2bMAC(e2bTokenLabel, id) }

// AccessTokenValid reports, in constant time, whether token is sandbox id's
// envd access token.
func (a *API) AccessTokenValid(id, token string) bool {
	return macEqual(token, a.AccessToken(id))
}

// macEqual compares a token sent with the one derived, in constant time.
func macEqual(got, want string) bool {
	return len(got) == len(want) && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
