package server

// E2B compatibility: the unmodified `e2b` SDKs work against SPACE
// (docs/e2b.md).
//
// Two surfaces, both on the API listener:
//
//   - the REST API under /e2b (E2B_API_URL=http://HOST:PORT/e2b): E2B's
//     paths, JSON field names, status codes and {code, message} errors,
//     each call mapped onto SPACE's own lifecycle by calling the operations
//     of internal/service, as the /v1 handlers do (e2b_sandboxes.go);
//   - the data plane at the listener's root (E2B_SANDBOX_URL=http://HOST:PORT):
//     requests carrying E2b-Sandbox-Id / E2b-Sandbox-Port, or sent to the
//     host name 49983-{id}.{ingress domain}, go to the sandbox's guest daemon,
//     which speaks envd's protocol (e2b_proxy.go); other ports go to the
//     sandbox's HTTP services, public by default as on E2B
//     (e2b_traffic.go).
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
// HMAC-SHA256 under a server key of a label and the sandbox id (e2bTokens).
// A MAC rather than a hashed random token because Sandbox.connect(id), from
// any process, must be answered with the token again, and a hash cannot be
// turned back into it. It is bound to the sandbox id and not to the
// execution generation: the SDK keeps the token of its create for the
// sandbox's life (a paused and resumed sandbox keeps its token in E2B too),
// and ids are never reused, so a token opens exactly one sandbox, ever.
// The trafficAccessToken of a sandbox with private ports is made the same
// way under another label.

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
)

// E2BPathPrefix is the path of the E2B REST API on the API listener:
// E2B_API_URL is the API URL with it.
const E2BPathPrefix = "/e2b"

// e2bEnvdPort is the port the E2B SDKs address the guest daemon (envd) by.
const e2bEnvdPort = 49983

// e2bEnvdVersion is the envdVersion the REST API reports: the guest
// daemon's (guestd.Version; a test keeps them equal), above every version
// gate of the current SDKs (0.6.4 is the last they check).
const e2bEnvdVersion = "0.7.0"

// registerE2B adds the E2B REST API to mux, under E2BPathPrefix.
func (s *Server) registerE2B(mux *routeMux) {
	route := func(pattern string, h http.HandlerFunc) {
		method, path, _ := strings.Cut(pattern, " ")
		full := method + " " + E2BPathPrefix + path
		mux.Handle(full, s.instrument(full, s.e2bErrors(s.e2bAuth(h))))
	}
	mux.Handle("GET "+E2BPathPrefix+"/health", s.instrument("GET /e2b/health", http.HandlerFunc(s.handleE2BHealth)))

	route("POST /sandboxes", s.handleE2BCreate)
	route("POST /v2/sandboxes", s.handleE2BCreate)
	route("GET /sandboxes", s.handleE2BListV1)
	route("GET /v2/sandboxes", s.handleE2BList)
	route("GET /sandboxes/{id}", s.handleE2BGet)
	route("DELETE /sandboxes/{id}", s.handleE2BKill)
	route("POST /sandboxes/{id}/timeout", s.handleE2BTimeout)
	route("POST /sandboxes/{id}/refreshes", s.handleE2BRefresh)
	route("POST /sandboxes/{id}/pause", s.handleE2BPause)
	route("POST /sandboxes/{id}/connect", s.handleE2BConnect)
	route("POST /v2/sandboxes/{id}/connect", s.handleE2BConnect)
	route("POST /sandboxes/{id}/resume", s.handleE2BResume)
	route("GET /sandboxes/{id}/metrics", s.handleE2BMetrics)
	route("POST /sandboxes/{id}/snapshots", s.handleE2BCreateSnapshot)
	route("GET /snapshots", s.handleE2BListSnapshots)
	route("DELETE /templates/{id}", s.handleE2BDeleteSnapshot)
	route("POST /sandboxes/{id}/fork", s.handleE2BFork)
	mux.Handle(E2BPathPrefix+"/", s.e2bErrors(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeE2BError(w, http.StatusNotFound, "no E2B route "+r.Method+" "+clip(r.URL.Path)+" (docs/e2b.md lists what SPACE implements)")
	})))
}

func (s *Server) handleE2BHealth(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("Health check successful"))
}

// e2bAuth authenticates an E2B request with the SPACE API key it carries
// in X-API-Key (E2B's header), else in Authorization: Bearer.
func (s *Server) e2bAuth(next http.HandlerFunc) http.HandlerFunc {
	auth := s.authenticate(next)
	return func(w http.ResponseWriter, r *http.Request) {
		if key := strings.TrimSpace(r.Header.Get("X-API-Key")); key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		auth(w, r)
	}
}

// e2bError is E2B's error body.
type e2bError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeE2BError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, e2bError{Code: status, Message: msg})
}

// writeE2BErr answers err the E2B way: SPACE's status, E2B's body.
func (s *Server) writeE2BErr(w http.ResponseWriter, r *http.Request, err error) {
	e := s.e2bErrorOf(r, err)
	writeJSON(w, e.Code, e)
}

// e2bErrorOf is err as E2B's error body: the status SPACE answers it with
// as the code, and the message writeError would show (an internal error's
// causes logged, not shown).
func (s *Server) e2bErrorOf(r *http.Request, err error) e2bError {
	status, _ := statusOf(err)
	msg := err.Error()
	if status == http.StatusInternalServerError {
		s.log.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		msg = "internal error; the server log has the details"
	}
	return e2bError{Code: status, Message: msg}
}

// e2bErrors rewrites SPACE error bodies ({"code": "not_found", ...}) that
// the handlers it wraps write into E2B's ({"code": 404, ...}): the SDKs
// branch on the numeric code field.
func (s *Server) e2bErrors(next http.Handler) http.Handler {
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

// e2bTokens derives the per-sandbox tokens of the E2B data plane.
type e2bTokens struct {
	once sync.Once
	key  []byte
}

// e2bTokenLabel separates the envd access token from any other MAC under
// the same key.
const e2bTokenLabel = "space e2b envd access token v1\x00"

// e2bKeyLabel is sealed once, deterministically, to derive the token key
// from the server's CA sealing key (see tokenKey).
const e2bKeyLabel = "space e2b token key derivation v1"

// tokenKey returns the MAC key of the E2B tokens. It is derived from the
// server's persistent secret, the CA sealing key (DATA/ca-seal.key), so
// tokens survive restarts and agree across control planes sharing that
// file (seal.Sealer.Derive of a fixed label). A server without a sealer
// uses a random key: tokens then last until it restarts.
func (s *Server) e2bTokenKey() []byte {
	s.e2b.once.Do(func() {
		if c := s.cfg.CASealer; c != nil {
			sum := c.s.Derive(e2bKeyLabel)
			s.e2b.key = sum[:]
			return
		}
		s.e2b.key = make([]byte, 32)
		rand.Read(s.e2b.key)
		s.log.Warn("e2b: no CA sealing key configured; E2B access tokens are valid until the server restarts")
	})
	return s.e2b.key
}

// e2bMAC is the token of sandbox id for purpose label: hex
// HMAC-SHA256(key, label || id). The labels end with a NUL, which no
// sandbox id contains, so no label-and-id pair reads as another.
func (s *Server) e2bMAC(label, id string) string {
	m := hmac.New(sha256.New, s.e2bTokenKey())
	m.Write([]byte(label))
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

// e2bAccessToken is the envdAccessToken of sandbox id.
func (s *Server) e2bAccessToken(id string) string { return s.e2bMAC(e2bTokenLabel, id) }

// e2bTokenValid reports, in constant time, whether token is sandbox id's
// envd access token.
func (s *Server) e2bTokenValid(id, token string) bool {
	return macEqual(token, s.e2bAccessToken(id))
}

// macEqual compares a token sent with the one derived, in constant time.
func macEqual(got, want string) bool {
	return len(got) == len(want) && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
