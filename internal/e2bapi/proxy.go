package e2bapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
	"github.com/spacesandbox/space/internal/bridge"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/uploadbody"
)

// The E2B data plane (E2B_SANDBOX_URL): envd's protocol, proxied to the
// sandbox's guest daemon through the node that runs it.
//
// Routing. A request is E2B's when it carries E2b-Sandbox-Id (the SDKs send
// it, with E2b-Sandbox-Port, on every envd request), or when its Host is
// {port}-{id}.{ingress domain} with port 49983. The Host names the target
// when it is an ingress name, and then headers naming another sandbox or
// port are refused (400): a request cannot be routed by one and
// authorised for the other. Port 49983 is the guest daemon; other ports
// go through SPACE's ServicePort ingress: an exposed port with its own
// credentials (docs/ports.md), else, on a sandbox made through the E2B
// API, its rule for every HTTP port, public or behind E2B's traffic
// access token (traffic.go).
//
// Authorisation. Every request needs the sandbox's X-Access-Token (the
// envdAccessToken of create/connect), checked before the sandbox is looked
// up, so a wrong token learns nothing about which sandboxes exist. GET and
// POST /files also take envd's URL signature instead (the SDK's
// downloadUrl/uploadUrl). Neither the token nor the signature reaches the
// guest; the hop to the node carries a capability for the sandbox's current
// execution and the operation the path needs (bridge.GuestOp).
//
// Only envd's public paths are forwarded: the process and filesystem
// services, /files, /health and /envs; the guest daemon's control service
// and anything else answer 404.

// The E2B routing headers.
const (
	SandboxHeader = "E2b-Sandbox-Id"
	PortHeader    = "E2b-Sandbox-Port"
	TokenHeader   = "X-Access-Token"
)

// e2bTarget is the sandbox and port a data-plane request is for.
type e2bTarget struct {
	id     string // "" when the id is not a possible sandbox id
	port   int
	byHost bool
}

// errE2BSpoof marks a request whose Host and E2B headers disagree.
var errE2BSpoof = fmt.Errorf("%w: the Host names one sandbox port and the %s/%s headers another", errdefs.ErrInvalidArgument, SandboxHeader, PortHeader)

// parseE2BTarget finds the target of a request from its Host and E2B
// headers. ok is false for a request that is not E2B data-plane traffic.
func parseE2BTarget(host, domain, hdrID, hdrPort string) (t e2bTarget, ok bool, err error) {
	if id, port, isHost := service.ParseIngressHost(host, domain); isHost {
		if hdrID != "" && hdrID != id || hdrPort != "" && hdrPort != strconv.Itoa(port) {
			return e2bTarget{}, true, errE2BSpoof
		}
		if hdrID == "" && port != EnvdPort {
			return e2bTarget{}, false, nil // SPACE's ingress: not E2B's
		}
		return e2bTarget{id: id, port: port, byHost: true}, true, nil
	}
	if hdrID == "" {
		if hdrPort != "" {
			return e2bTarget{}, true, fmt.Errorf("%w: %s without %s", errdefs.ErrInvalidArgument, PortHeader, SandboxHeader)
		}
		return e2bTarget{}, false, nil
	}
	if hdrPort == "" {
		return e2bTarget{}, true, fmt.Errorf("%w: %s without %s", errdefs.ErrInvalidArgument, SandboxHeader, PortHeader)
	}
	port, err := service.ParsePort(hdrPort)
	if err != nil {
		return e2bTarget{}, true, err
	}
	if !sandbox.ValidID(hdrID) {
		hdrID = ""
	}
	return e2bTarget{id: hdrID, port: port}, true, nil
}

// WithData sends E2B data-plane requests to the E2B proxy and the rest
// to next.
func (a *API) WithData(next http.Handler) http.Handler {
	envd := a.host.Instrument("e2b envd", http.HandlerFunc(a.serveE2BEnvd))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, ok, err := parseE2BTarget(r.Host, a.domain, r.Header.Get(SandboxHeader), r.Header.Get(PortHeader))
		switch {
		case err != nil:
			writeE2BError(w, http.StatusBadRequest, err.Error())
		case !ok && isSignedFiles(r):
			envd.ServeHTTP(w, r)
		case !ok:
			next.ServeHTTP(w, r)
		case t.port != EnvdPort && a.e2bSandboxGone(r, t.id):
			writeE2BNotFound(w, t.id) // E2B's 502 for an unknown or deleted sandbox
		case t.port != EnvdPort:
			// Another port: SPACE's ServicePort ingress decides.
			r.Header.Del(SandboxHeader)
			r.Header.Del(PortHeader)
			a.host.ServeIngressHTTP(w, r, t.id, t.port, r.URL.EscapedPath())
		default:
			envd.ServeHTTP(w, r)
		}
	})
}

// e2bSandboxGone reports whether a request routed by E2B's headers to a
// port other than envd's names no sandbox that exists: an id that cannot
// be one, unknown, or deleted. E2B's proxy answers those 502 "The sandbox
// was not found" (writeE2BNotFound), where SPACE's ingress would say 404
// "no exposed port". A request with a wrong traffic token is left to the
// ingress, which refuses it before any lookup (403).
func (a *API) e2bSandboxGone(r *http.Request, id string) bool {
	if id == "" {
		return true
	}
	if tok := r.Header.Get(TrafficHeader); tok != "" && !a.TrafficTokenValid(id, tok) {
		return false
	}
	sb, err := a.svc.ByID(r.Context(), id)
	return errors.Is(err, errdefs.ErrNotFound) || err == nil && e2bState(sb.State) == ""
}

// isSignedFiles reports whether r is a /files request carrying a
// well-formed envd URL signature ("v1_" and 43 base64 characters): a URL
// from the SDK's downloadUrl or uploadUrl made with E2B_SANDBOX_URL, which
// names no sandbox. Finding its sandbox costs a scan of the running ones
// (e2bSignedSandbox), so anything else is not taken for one.
func isSignedFiles(r *http.Request) bool {
	if r.URL.Path != "/files" {
		return false
	}
	sig := r.URL.Query().Get("signature")
	return len(sig) == len("v1_")+base64.RawStdEncoding.EncodedLen(sha256.Size) && strings.HasPrefix(sig, "v1_")
}

// e2bEnvdPath reports whether path (unescaped, as the guest would read it)
// is one of envd's public paths, and with which method.
func e2bEnvdPath(method, path string) bool {
	switch path {
	case "/health", "/envs", "/metrics":
		return method == http.MethodGet
	case "/files":
		return method == http.MethodGet || method == http.MethodPost
	}
	svc, rpc, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if !ok || svc != "process.Process" && svc != "filesystem.Filesystem" || rpc == "" {
		return false
	}
	for _, c := range rpc {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return method == http.MethodPost
}

// serveE2BEnvd proxies one envd request to the sandbox's guest daemon.
func (a *API) serveE2BEnvd(w http.ResponseWriter, r *http.Request) {
	t, _, _ := parseE2BTarget(r.Host, a.domain, r.Header.Get(SandboxHeader), r.Header.Get(PortHeader))
	// The path is checked as it is forwarded: decoded, with no escapes that
	// could decode differently on the other side.
	if r.URL.RawPath != "" || !e2bEnvdPath(r.Method, r.URL.Path) {
		writeE2BError(w, http.StatusNotFound, fmt.Sprintf("no envd route %s %s", r.Method, service.Clip(r.URL.EscapedPath())))
		return
	}
	if t.id == "" && isSignedFiles(r) {
		t.id = a.e2bSignedSandbox(r)
	}
	switch a.e2bAuthorized(r, t.id) {
	case authOK:
	case authExpired:
		writeE2BError(w, http.StatusUnauthorized, errSignatureExpired)
		return
	default:
		writeE2BEnvdError(w, r, http.StatusUnauthorized, "unauthenticated",
			"missing or invalid "+TokenHeader+" (the envdAccessToken of Sandbox.create or Sandbox.connect) or file URL signature")
		return
	}
	sb, err := a.svc.ByID(r.Context(), t.id)
	if errors.Is(err, errdefs.ErrNotFound) || err == nil && e2bState(sb.State) == "" {
		writeE2BNotFound(w, t.id)
		return
	} else if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if r.URL.Path == "/metrics" {
		a.serveE2BEnvdMetrics(w, r, sb)
		return
	}
	// Every envd request in flight holds one of the sandbox's stream slots
	// (a process stream, a watch, a transfer, or a short call).
	release, err := a.host.OpenStream(sb)
	if err != nil {
		writeE2BTooManyStreams(w, r, err)
		return
	}
	defer release()
	transport, err := a.host.GuestTransport(r.Context(), sb, bridge.GuestOp(r.URL.Path))
	if err != nil {
		if errors.Is(err, errdefs.ErrConflict) {
			writeE2BNotFound(w, t.id) // paused or stopped: E2B's "not found"
			return
		}
		a.writeE2BErr(w, r, err)
		return
	}
	a.e2bProxy(transport, t.id).ServeHTTP(w, r)
}

// EnvdMetrics is envd's GET /metrics answer: the sandbox's use now.
type EnvdMetrics struct {
	TS          int64   `json:"ts"`
	CPUCount    int     `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotal    uint64  `json:"mem_total"`
	MemUsed     uint64  `json:"mem_used"`
	MemTotalMiB uint64  `json:"mem_total_mib"`
	MemUsedMiB  uint64  `json:"mem_used_mib"`
	MemCache    *uint64 `json:"mem_cache,omitempty"`
}

// serveE2BEnvdMetrics answers envd's GET /metrics in the control plane
// rather than in the guest: an ns sandbox's /proc shows the host's CPUs
// and memory, so the figures come from the node (and a VM's memory from
// its own /proc/meminfo), as for the REST metrics.
func (a *API) serveE2BEnvdMetrics(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	m, err := a.sampleE2BMetric(r.Context(), sb)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if m == nil {
		writeE2BNotFound(w, sb.ID) // not running: what the proxy answers for it
		return
	}
	writeJSON(w, http.StatusOK, EnvdMetrics{
		TS: m.TimestampUnix, CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct,
		MemTotal: m.MemTotal, MemUsed: m.MemUsed, MemTotalMiB: m.MemTotal >> 20, MemUsedMiB: m.MemUsed >> 20, MemCache: m.MemCache,
	})
}

// e2bProxy forwards to the guest daemon over transport (guestFor's, which
// adds the capability), streaming both ways.
//
// An envd /files upload is bounded as the REST API's is (uploadbody): a
// Content-Length over the file limit is refused before the guest is reached,
// a longer body is cut at the limit, a stalled one ends after the idle
// timeout; the guest keeps the previous file in each case.
func (a *API) e2bProxy(transport http.RoundTripper, id string) http.Handler {
	var upload *uploadbody.Body // this request's upload body, if it is one
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = &url.URL{Scheme: "http", Host: "guest", Path: pr.In.URL.Path, RawQuery: withoutSignature(pr.In.URL.RawQuery)}
			pr.Out.Host = "guest"
			for _, h := range []string{TokenHeader, TrafficHeader, SandboxHeader, PortHeader, capability.Header, "Cookie"} {
				pr.Out.Header.Del(h)
			}
			pr.Out.Header.Set(filesystemv1.EnvdCompatHeader, filesystemv1.EnvdCompatE2B) // envd's answers (Remove)
		},
		Transport:     transport,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			switch {
			case upload != nil && upload.TooLarge():
				writeE2BError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the file is over the %d byte limit; it was not written", a.maxFile))
				return
			case upload != nil && upload.Stalled():
				writeE2BError(w, http.StatusBadRequest, fmt.Sprintf("the upload's body sent nothing for %s (a Content-Length larger than the body?); the file was not written", a.uploadIdle))
				return
			case r.Context().Err() != nil:
				return // the client went away
			}
			a.log.Warn("e2b envd proxy", "sandbox", id, "path", r.URL.Path, "err", err)
			writeJSON(w, http.StatusBadGateway, ProxyError{Message: "The sandbox is not reachable: " + err.Error(), SandboxID: id, Code: http.StatusBadGateway})
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/files" {
			if r.ContentLength > a.maxFile {
				writeE2BError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body's Content-Length %d is over the %d byte file limit", r.ContentLength, a.maxFile))
				return
			}
			upload = uploadbody.Limit(w, r, a.maxFile, a.uploadIdle)
		}
		_ = http.NewResponseController(w).EnableFullDuplex()
		proxy.ServeHTTP(w, r)
	})
}

func writeE2BNotFound(w http.ResponseWriter, id string) {
	writeJSON(w, http.StatusBadGateway, ProxyError{Message: "The sandbox was not found", SandboxID: id, Code: http.StatusBadGateway})
}

// writeE2BEnvdError answers an envd request with an error its client
// reads: a Connect error for the RPC paths, E2B's {code, message} for the
// others.
func writeE2BEnvdError(w http.ResponseWriter, r *http.Request, status int, connectCode, msg string) {
	if strings.Contains(r.URL.Path, ".") { // /process.Process/…, /filesystem.Filesystem/…
		writeJSON(w, status, map[string]string{"code": connectCode, "message": msg})
		return
	}
	writeE2BError(w, status, msg)
}

// writeE2BTooManyStreams answers a request refused by the per-sandbox
// stream cap (Host.OpenStream) with an error its client reads as such: a
// Connect streaming call (process Start and Connect, WatchDir) gets the
// protocol's end-of-stream error with code resource_exhausted (a bare 429
// would read as "unavailable"); the others 429, as writeE2BEnvdError
// answers. The message starts with the reason, too_many_streams.
func writeE2BTooManyStreams(w http.ResponseWriter, r *http.Request, err error) {
	msg := string(errdefs.ReasonOf(err)) + ": " + err.Error()
	ct := r.Header.Get("Content-Type")
	if !strings.HasPrefix(ct, "application/connect+") {
		writeE2BEnvdError(w, r, http.StatusTooManyRequests, "resource_exhausted", msg)
		return
	}
	end, _ := json.Marshal(map[string]any{"error": map[string]string{"code": "resource_exhausted", "message": msg}})
	frame := make([]byte, 5, 5+len(end))
	frame[0] = 0x02 // end of stream
	binary.BigEndian.PutUint32(frame[1:], uint32(len(end)))
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(frame, end...))
}

// e2bAuth is what a request's credentials prove.
type e2bAuth int

const (
	authNone    e2bAuth = iota // no valid credential
	authExpired                // a genuine envd URL signature past its expiry
	authOK
)

// errSignatureExpired is envd's answer to a genuine signed URL past its
// signature_expiration.
const errSignatureExpired = "signature is already expired"

// e2bAuthorized reports what r's credentials prove for sandbox id: its
// access token, or a valid envd signature for its /files operation (a
// genuine one past its expiry is authExpired).
func (a *API) e2bAuthorized(r *http.Request, id string) e2bAuth {
	if id == "" {
		return authNone
	}
	if tok := r.Header.Get(TokenHeader); tok != "" {
		if a.AccessTokenValid(id, tok) {
			return authOK
		}
		return authNone
	}
	if r.URL.Path == "/files" {
		return e2bSignatureCheck(r, a.AccessToken(id), time.Now())
	}
	return authNone
}

// e2bSignatureValid reports whether r carries a valid, unexpired envd
// file URL signature for token.
func e2bSignatureValid(r *http.Request, token string, now time.Time) bool {
	return e2bSignatureCheck(r, token, now) == authOK
}

// e2bSignatureCheck checks envd's file URL signature:
// "v1_" + base64(sha256("<path>:<read|write>:<username>:<token>[:<expiry>]"))
// without padding, for GET (read) or POST (write). The expiry is judged
// only for a signature that matches, so "expired" tells nothing to whoever
// forged one.
func e2bSignatureCheck(r *http.Request, token string, now time.Time) e2bAuth {
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" || len(q["signature"]) != 1 || len(q["path"]) > 1 || len(q["username"]) > 1 {
		return authNone
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	raw := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + token
	expired := false
	if exp := q.Get("signature_expiration"); exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != exp {
			return authNone
		}
		expired = now.Unix() > n
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	want := "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
	if len(sig) != len(want) || subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return authNone
	}
	if expired {
		return authExpired
	}
	return authOK
}

// e2bSignedSandbox finds the sandbox whose token signs r, for a signed
// /files URL that names none: the signature is tried with the token of
// each running sandbox (an expired signature finds its sandbox too, to be
// answered as expired). "" when none matches.
func (a *API) e2bSignedSandbox(r *http.Request) string {
	sbs, err := a.svc.Running(r.Context())
	if err != nil {
		return ""
	}
	now := time.Now()
	for _, sb := range sbs {
		if e2bSignatureCheck(r, a.AccessToken(sb.ID), now) != authNone {
			return sb.ID
		}
	}
	return ""
}

// withoutSignature drops envd's signature parameters from a raw query,
// keeping the others in their order and encoding.
func withoutSignature(raw string) string {
	return withoutParams(raw, "signature", "signature_expiration")
}

// withoutParams drops the query parameters names from raw, keeping the
// rest byte for byte (the same as the ingress's: the query a guest sees is
// the one sent, less what authenticated it).
func withoutParams(raw string, names ...string) string {
	if raw == "" {
		return raw
	}
	parts := strings.Split(raw, "&")
	kept := parts[:0]
	for _, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if name, err := url.QueryUnescape(k); err == nil && slices.Contains(names, name) {
			continue
		}
		kept = append(kept, p)
	}
	return strings.Join(kept, "&")
}
