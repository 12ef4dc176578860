package intercept

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Draining what the guest still sends after a refusal, so that closing the
// connection does not reset it before the guest has read the answer.
const (
	lingerTime  = time.Second
	lingerBytes = 256 << 10
)

// session is one intercepted connection after the TLS handshake: the
// decrypted stream from the guest and, once needed, one upstream connection.
// Requests are served one at a time; only a request body is forwarded by a
// second goroutine, which the session always waits for.
type session struct {
	ic   *Interceptor
	t    Timeouts
	flow Flow
	host string // normalized server name of the guest's TLS session
	log  *slog.Logger

	guest *timeoutConn
	limit *headerLimit
	gr    *bufio.Reader
	gw    *bufio.Writer

	mu     sync.Mutex // guards up and closed
	up     *upstream
	closed bool

	// secrets are the secrets injected so far on this connection, and red
	// redacts them from every response from then on (nil before the
	// first). Only the request loop's goroutine uses them; forgetSecrets
	// zeroes the copies when the connection ends (the automaton, which
	// encodes the forms, is left to the garbage collector).
	secrets []injected
	red     *redactor
}

// serveHTTP runs the request loop over conn, the decrypted stream from the
// guest, for the TLS session of host. It is Serve after the handshake, and
// what the fuzz test drives directly.
func (ic *Interceptor) serveHTTP(ctx context.Context, conn net.Conn, flow Flow, host string) error {
	t := ic.Timeouts.withDefaults()
	guest := newTimeoutConn(conn, t.Inactivity)
	limit := &headerLimit{r: guest}
	s := &session{
		ic: ic, t: t, flow: flow, host: host,
		log:   ic.logger().With("host", host, "dst", flow.Dst.String()),
		guest: guest, limit: limit,
		gr: bufio.NewReader(limit),
		gw: bufio.NewWriter(guest),
	}
	stop := context.AfterFunc(ctx, s.shutdown)
	defer stop()
	defer s.shutdown()
	defer s.forgetSecrets()
	for {
		req, err := s.readRequest()
		if err != nil {
			return err
		}
		if req == nil {
			return nil
		}
		keep, err := s.handle(ctx, req)
		if err != nil || !keep {
			return err
		}
	}
}

// shutdown closes both connections; safe to call more than once.
func (s *session) shutdown() {
	s.mu.Lock()
	s.closed = true
	up := s.up
	s.up = nil
	s.mu.Unlock()
	if up != nil {
		up.conn.Close()
	}
	s.guest.Close()
}

// readRequest reads the guest's next request header. It returns nil, nil
// when the guest closed the connection or stayed idle between requests.
func (s *session) readRequest() (*http.Request, error) {
	s.limit.set(MaxRequestHeaderBytes)
	s.guest.readUntil(time.Now().Add(s.t.Idle))
	if _, err := s.gr.Peek(1); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
			return nil, nil
		}
		return nil, fmt.Errorf("intercept %s: wait for a request: %w: %w", s.host, err, errdefs.ErrUnavailable)
	}
	s.guest.readUntil(time.Now().Add(s.t.RequestHeader))
	req, err := http.ReadRequest(s.gr)
	if err != nil {
		if s.limit.exceeded() {
			_, err := s.refuse(nil, http.StatusRequestHeaderFieldsTooLarge,
				fmt.Sprintf("request header larger than %d bytes", MaxRequestHeaderBytes), errdefs.ErrInvalidArgument)
			return nil, err
		}
		// The text of err quotes the guest's bytes; keep it short.
		_, err := s.refuse(nil, http.StatusBadRequest, "malformed HTTP/1.1 request",
			fmt.Errorf("read request: %.200s: %w", err.Error(), errdefs.ErrInvalidArgument))
		return nil, err
	}
	s.limit.off()
	s.guest.readEach(s.t.Inactivity)
	return req, nil
}

// handle checks, resolves and forwards one request, and reports whether
// the connection may carry another.
func (s *session) handle(ctx context.Context, req *http.Request) (bool, error) {
	if status, msg, class := s.check(req); status != 0 {
		return s.refuse(req, status, msg, class)
	}
	cred, status, msg, err := s.resolve(ctx)
	if status != 0 {
		return s.refuse(req, status, msg, err)
	}
	credID := ""
	if cred != nil {
		credID = cred.ID
		if status, msg, err := s.guard(req, cred); status != 0 {
			cred.Zero()
			return s.refuse(req, status, msg, err)
		}
	}
	out, err := outgoing(req, cred) // zeroes cred
	if err != nil {
		return s.refuse(req, http.StatusBadGateway, "the credential for this host cannot be added to the request", err)
	}
	return s.forward(ctx, req, out, credID)
}

// guard runs before cred is added to req: it refuses a request that
// carries a credential of the guest's own, and makes sure every response
// on the connection from now on is redacted of cred's secret. A non-zero
// status is the refusal.
func (s *session) guard(req *http.Request, cred *credentials.Credential) (int, string, error) {
	if name := ownCredential(req.Header, cred.Injection); name != "" {
		return http.StatusForbidden, fmt.Sprintf("the request carries its own credential in %s, and the gateway adds the credential for %s; remove that header", name, s.host),
			fmt.Errorf("credential %s: guest sent %s: %w", cred.ID, name, errdefs.ErrPermissionDenied)
	}
	if err := s.addSecrets(cred); err != nil {
		return http.StatusBadGateway, "the credential for " + s.host + " cannot be redacted from responses, so it is not used", err
	}
	return 0, "", nil
}

// addSecrets adds cred's secrets to the ones redacted on this connection,
// rebuilding the redactor when one is new.
func (s *session) addSecrets(cred *credentials.Credential) error {
	secrets := injectedSecrets(cred)
	next := slices.Clone(s.secrets)
	for _, sec := range secrets {
		if sameSecret(next, cred.ID, sec) {
			clear(sec)
			continue
		}
		next = append(next, injected{credID: cred.ID, secret: sec})
	}
	if len(next) == len(s.secrets) {
		return nil
	}
	red, err := newRedactor(next)
	if err != nil {
		for _, in := range next[len(s.secrets):] {
			clear(in.secret)
		}
		return err
	}
	s.secrets, s.red = next, red
	return nil
}

// forgetSecrets zeroes the session's copies of the injected secrets.
func (s *session) forgetSecrets() {
	for _, in := range s.secrets {
		clear(in.secret)
	}
	s.secrets, s.red = nil, nil
}

// check decides whether the request may be forwarded at all; a non-zero
// status is the refusal.
func (s *session) check(req *http.Request) (status int, msg string, class error) {
	if req.ProtoMajor != 1 {
		return http.StatusHTTPVersionNotSupported, "only HTTP/1.x is served on an intercepted connection", errdefs.ErrInvalidArgument
	}
	if req.Method == http.MethodConnect {
		return http.StatusNotImplemented, "CONNECT is not supported on an intercepted connection", errdefs.ErrInvalidArgument
	}
	if req.Method == http.MethodTrace {
		// TRACE echoes the request, credential included; redaction would
		// catch it, but there is no reason to ask.
		return http.StatusNotImplemented, "TRACE is not supported on a connection that carries a credential", errdefs.ErrInvalidArgument
	}
	if len(req.Header["Upgrade"]) > 0 || httpguts.HeaderValuesContainsToken(req.Header["Connection"], "upgrade") {
		return http.StatusNotImplemented, "protocol upgrades (WebSocket, h2c) are not supported on a connection that carries a credential", errdefs.ErrInvalidArgument
	}
	if req.URL.Opaque != "" || req.URL.Scheme != "" && !strings.EqualFold(req.URL.Scheme, "https") && !strings.EqualFold(req.URL.Scheme, "http") {
		return http.StatusBadRequest, "unsupported request target", errdefs.ErrInvalidArgument
	}
	if e := req.Header["Expect"]; len(e) > 1 || len(e) == 1 && !strings.EqualFold(e[0], "100-continue") {
		return http.StatusExpectationFailed, "only Expect: 100-continue is supported", errdefs.ErrInvalidArgument
	}
	name, err := hostName(req.Host)
	if err != nil {
		return http.StatusBadRequest, "missing or malformed Host", errdefs.ErrInvalidArgument
	}
	if name != s.host {
		return http.StatusForbidden, fmt.Sprintf("Host %s does not match the TLS server name %s", name, s.host), errdefs.ErrPermissionDenied
	}
	if d := s.ic.Policy.Load().CheckHost(s.flow.ConnDomain, req.Host); !d.Allow {
		return http.StatusForbidden, "egress policy: " + d.Reason, errdefs.ErrPermissionDenied
	}
	return 0, "", nil
}

// hostName returns the normalized host of an HTTP Host value, whose port,
// if any, must be numeric.
func hostName(hostport string) (string, error) {
	host, port := hostport, ""
	if strings.HasPrefix(hostport, "[") {
		end := strings.IndexByte(hostport, ']')
		if end < 0 {
			return "", fmt.Errorf("host %.80q: unclosed bracket: %w", hostport, errdefs.ErrInvalidArgument)
		}
		host, port = hostport[:end+1], hostport[end+1:]
		if port != "" && port[0] != ':' {
			return "", fmt.Errorf("host %.80q: junk after bracket: %w", hostport, errdefs.ErrInvalidArgument)
		}
	} else if i := strings.LastIndexByte(hostport, ':'); i >= 0 && strings.Count(hostport, ":") == 1 {
		host, port = hostport[:i], hostport[i:]
	}
	if port != "" {
		digits := port[1:]
		if len(digits) == 0 || len(digits) > 5 || strings.Trim(digits, "0123456789") != "" {
			return "", fmt.Errorf("host %.80q: bad port: %w", hostport, errdefs.ErrInvalidArgument)
		}
	}
	return credentials.NormalizeHost(host)
}

// resolve asks for the request's credential. A nil credential with status 0
// means the host has no credential rule: forward without one.
func (s *session) resolve(ctx context.Context) (*credentials.Credential, int, string, error) {
	req := s.ic.Identity
	req.Host = s.host
	cred, err := s.ic.Credentials.Resolve(ctx, req)
	switch {
	case err == nil && cred != nil:
		return cred, 0, "", nil
	case err == nil:
		err = fmt.Errorf("credential source returned neither a credential nor an error: %w", errdefs.ErrUnavailable)
	case errors.Is(err, errdefs.ErrNotFound), errors.Is(err, errdefs.ErrPermissionDenied):
		return nil, 0, "", nil
	case errors.Is(err, errdefs.ErrResourceExhausted):
		return nil, http.StatusTooManyRequests, "the credential for " + s.host + " is rate limited; retry later", err
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		return nil, http.StatusForbidden, "the credential for " + s.host + " has expired", err
	}
	return nil, http.StatusBadGateway, "the credential for " + s.host + " could not be resolved", errors.Join(err, errdefs.ErrUnavailable)
}

// refuse answers req (nil when it could not be parsed) locally with status
// and a one-line text body, then ends the connection. It returns the error
// Serve reports, of cause's class.
func (s *session) refuse(req *http.Request, status int, msg string, cause error) (bool, error) {
	body := "space gateway: " + msg + "\n"
	resp := &http.Response{
		StatusCode: status, ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":           {"text/plain; charset=utf-8"},
			"X-Content-Type-Options": {"nosniff"},
		},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Close:         true,
		Request:       req,
	}
	method := ""
	if req != nil {
		method = req.Method
	}
	s.log.Info("refused request", "method", method, "status", status, "reason", msg)
	if err := resp.Write(s.gw); err == nil {
		_ = s.gw.Flush()
	}
	s.linger()
	return false, fmt.Errorf("intercept %s: %d %s: %w", s.host, status, msg, cause)
}

// linger half-closes the guest connection and discards what the guest
// still sends for a moment, so the close does not reset the connection
// under an answer the guest has not read yet.
func (s *session) linger() {
	if cw, ok := s.guest.Conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	s.limit.off()
	s.guest.readUntil(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, s.gr, lingerBytes)
}
