package intercept

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// upstream is the TLS connection to the real server, dialled when the first
// request needs it and kept for the next ones until either side closes it.
type upstream struct {
	conn   *timeoutConn
	limit  *headerLimit
	r      *bufio.Reader
	w      *bufio.Writer
	served int // requests answered on it; a reused connection may be stale
	idle   time.Duration
}

// stale reports, without waiting, whether the server closed the kept
// connection while it was idle (servers and load balancers close idle
// connections after their own timeouts), or sent bytes nobody asked for.
// A request with a body cannot be retried once the body was streamed, so
// it should not be sent on such a connection; a close that races with the
// request is still possible, and is handled by forwardNoBody's retry or
// answered 502.
func (u *upstream) stale() bool {
	if u.r.Buffered() > 0 {
		return true
	}
	u.conn.readUntil(time.Now())
	_, err := u.r.Peek(1)
	u.conn.readEach(u.idle)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// upstream returns the live upstream connection, dialling it if needed.
func (s *session) upstream(ctx context.Context) (*upstream, error) {
	s.mu.Lock()
	up, closed := s.up, s.closed
	s.mu.Unlock()
	if up != nil && up.served > 0 && up.stale() {
		s.dropUpstream()
		up = nil
	}
	if up != nil {
		return up, nil
	}
	if closed {
		return nil, fmt.Errorf("upstream %s: connection closing: %w", s.host, errdefs.ErrUnavailable)
	}
	dctx, cancel := context.WithTimeout(ctx, s.t.Handshake)
	defer cancel()
	raw, err := s.ic.DialUpstream(dctx)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: dial %s: %w", s.host, s.flow.Dst, errors.Join(err, errdefs.ErrUnavailable))
	}
	tc := tls.Client(raw, &tls.Config{
		ServerName: s.host,
		RootCAs:    s.ic.UpstreamRoots,
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
	})
	if err := tc.HandshakeContext(dctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("upstream %s: TLS handshake: %w", s.host, errors.Join(err, errdefs.ErrUnavailable))
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" {
		tc.Close()
		return nil, fmt.Errorf("upstream %s: negotiated protocol %q, want http/1.1: %w", s.host, p, errdefs.ErrUnavailable)
	}
	conn := newTimeoutConn(tc, s.t.Inactivity)
	conn.readEach(s.t.Inactivity)
	limit := &headerLimit{r: conn}
	up = &upstream{conn: conn, limit: limit, r: bufio.NewReader(limit), w: bufio.NewWriter(conn), idle: s.t.Inactivity}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		conn.Close()
		return nil, fmt.Errorf("upstream %s: connection closing: %w", s.host, errdefs.ErrUnavailable)
	}
	s.up = up
	return up, nil
}

// dropUpstream closes the upstream connection; the next request dials anew.
func (s *session) dropUpstream() {
	s.mu.Lock()
	up := s.up
	s.up = nil
	s.mu.Unlock()
	if up != nil {
		up.conn.Close()
	}
}

// upstreamMessage is what the guest is told about an upstream failure.
func upstreamMessage(err error) string {
	var verr *tls.CertificateVerificationError
	var uerr x509.UnknownAuthorityError
	var herr x509.HostnameError
	if errors.As(err, &verr) || errors.As(err, &uerr) || errors.As(err, &herr) {
		return "the upstream's TLS certificate failed verification"
	}
	return "the upstream could not be reached or did not answer"
}

// forward sends out (the rewritten req) upstream and relays the answer.
func (s *session) forward(ctx context.Context, req, out *http.Request, credID string) (bool, error) {
	if out.Body == nil || out.Body == http.NoBody {
		return s.forwardNoBody(ctx, req, out, credID)
	}
	return s.forwardBody(ctx, req, out, credID)
}

// forwardNoBody forwards a request without a body. When a reused upstream
// connection turns out to have been closed by the server, an idempotent
// request is retried once on a new one, as net/http's Transport does.
func (s *session) forwardNoBody(ctx context.Context, req, out *http.Request, credID string) (bool, error) {
	up, err := s.upstream(ctx)
	if err != nil {
		return s.refuse(req, http.StatusBadGateway, upstreamMessage(err), err)
	}
	resp, err := s.roundTrip(ctx, up, out)
	if err != nil && up.served > 0 && idempotent(out.Method) && staleConn(err) {
		s.dropUpstream()
		if up, err = s.upstream(ctx); err == nil {
			resp, err = s.roundTrip(ctx, up, out)
		}
	}
	if err != nil {
		s.dropUpstream()
		return s.refuse(req, http.StatusBadGateway, upstreamMessage(err), err)
	}
	return s.relay(ctx, req, resp, up, true, credID)
}

func (s *session) roundTrip(ctx context.Context, up *upstream, out *http.Request) (*http.Response, error) {
	if err := out.Write(up.w); err != nil {
		return nil, fmt.Errorf("upstream %s: write request: %w", s.host, errors.Join(err, errdefs.ErrUnavailable))
	}
	if err := up.w.Flush(); err != nil {
		return nil, fmt.Errorf("upstream %s: write request: %w", s.host, errors.Join(err, errdefs.ErrUnavailable))
	}
	return s.readResponse(ctx, up, out)
}

// forwardBody forwards a request with a body. The body streams from the
// guest to the upstream in a second goroutine while this one waits for the
// response, so an upstream that answers early (401, 413) is relayed at once.
func (s *session) forwardBody(ctx context.Context, req, out *http.Request, credID string) (bool, error) {
	up, err := s.upstream(ctx)
	if err != nil {
		return s.refuse(req, http.StatusBadGateway, upstreamMessage(err), err)
	}
	if len(req.Header["Expect"]) > 0 {
		// The guest waits for leave to send its body; give it, since
		// the request was allowed. The upstream gets no Expect.
		if _, err := io.WriteString(s.gw, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return false, fmt.Errorf("intercept %s: write 100 Continue: %w", s.host, errors.Join(err, errdefs.ErrUnavailable))
		}
		if err := s.gw.Flush(); err != nil {
			return false, fmt.Errorf("intercept %s: write 100 Continue: %w", s.host, errors.Join(err, errdefs.ErrUnavailable))
		}
	}
	body := &trackedBody{ReadCloser: out.Body}
	out.Body = body
	wrote := make(chan error, 1)
	go func() {
		err := out.Write(up.w)
		if err == nil {
			err = up.w.Flush()
		}
		if err != nil {
			up.conn.Close() // a partial request: the upstream must not wait for the rest
		}
		wrote <- err
	}()
	resp, err := s.readResponse(ctx, up, out)
	if err != nil {
		s.dropUpstream()
		s.guest.interruptReads()
		<-wrote
		if _, berr := body.state(); berr != nil && !errors.Is(berr, errInterrupted) {
			return s.refuse(req, http.StatusBadRequest, "incomplete or malformed request body",
				fmt.Errorf("request body: %w: %w", berr, errdefs.ErrInvalidArgument))
		}
		return s.refuse(req, http.StatusBadGateway, upstreamMessage(err), err)
	}
	if eof, _ := body.state(); eof {
		werr := <-wrote // only the final flush can still be under way
		keep, rerr := s.relay(ctx, req, resp, up, true, credID)
		if werr != nil {
			s.dropUpstream() // it answered, but the connection is broken
		}
		return keep, rerr
	}
	// The upstream answered before it had the whole body: relay the answer,
	// then close, since the rest of the body is still on the connection.
	_, rerr := s.relay(ctx, req, resp, up, false, credID)
	s.dropUpstream()
	s.guest.interruptReads()
	<-wrote
	if rerr == nil {
		s.linger()
	}
	return false, rerr
}

// readResponse reads the upstream's final response to out, relaying any
// informational (1xx) responses before it to the guest.
func (s *session) readResponse(ctx context.Context, up *upstream, out *http.Request) (*http.Response, error) {
	for range max1xx {
		up.limit.set(MaxResponseHeaderBytes)
		// Peek first: ReadResponse reports a connection closed before any
		// byte as io.ErrUnexpectedEOF, and staleConn needs io.EOF.
		if _, err := up.r.Peek(1); err != nil {
			return nil, fmt.Errorf("upstream %s: read response: %w", s.host, errors.Join(err, errdefs.ErrUnavailable))
		}
		resp, err := http.ReadResponse(up.r, out)
		if err != nil {
			if up.limit.exceeded() {
				err = fmt.Errorf("response header larger than %d bytes", MaxResponseHeaderBytes)
			}
			return nil, fmt.Errorf("upstream %s: read response: %w", s.host, errors.Join(err, errdefs.ErrUnavailable))
		}
		up.limit.off()
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			resp.Body.Close()
			return nil, fmt.Errorf("upstream %s: switched protocols, which was not asked for: %w", s.host, errdefs.ErrUnavailable)
		case resp.StatusCode >= 200:
			up.served++
			return resp, nil
		}
		removeHopByHop(resp.Header)
		if s.red != nil {
			if err := s.redactHead(ctx, resp); err != nil {
				return nil, err
			}
		}
		if err := write1xx(s.gw, resp); err != nil {
			return nil, fmt.Errorf("intercept %s: relay %d: %w", s.host, resp.StatusCode, errors.Join(err, errdefs.ErrUnavailable))
		}
	}
	return nil, fmt.Errorf("upstream %s: more than %d informational responses: %w", s.host, max1xx, errdefs.ErrUnavailable)
}

func write1xx(w *bufio.Writer, resp *http.Response) error {
	if _, err := fmt.Fprintf(w, "HTTP/1.1 %03d %s\r\n", resp.StatusCode, http.StatusText(resp.StatusCode)); err != nil {
		return err
	}
	if err := resp.Header.Write(w); err != nil {
		return err
	}
	if _, err := io.WriteString(w, "\r\n"); err != nil {
		return err
	}
	return w.Flush()
}

// relay writes resp to the guest and reports whether the connection may
// carry another request: not when the guest asked to close, nor when the
// request body was not read to its end (complete false), nor when the
// guest can only learn the end of the body from the close.
func (s *session) relay(ctx context.Context, req *http.Request, resp *http.Response, up *upstream, complete bool, credID string) (bool, error) {
	defer resp.Body.Close()
	upstreamClose := resp.Close
	removeHopByHop(resp.Header)
	if s.red != nil {
		if err := s.redactResponse(ctx, req, resp); err != nil {
			s.dropUpstream()
			msg := "the response carried the credential's secret and its removal could not be recorded in the audit log; it was not relayed"
			if errors.Is(err, errUnscannable) {
				msg = "the upstream sent a response compressed in a way the gateway cannot scan for the credential; it was not relayed"
			}
			return s.refuse(req, http.StatusBadGateway, msg, err)
		}
	}
	framed := frameForGuest(req, resp)
	keep := complete && !req.Close && framed
	resp.Close = !keep
	resp.ProtoMajor, resp.ProtoMinor = 1, 1
	if keep && !req.ProtoAtLeast(1, 1) {
		resp.Header.Set("Connection", "keep-alive")
	}
	s.log.Info("forwarded request", "method", req.Method, "status", resp.StatusCode, "credential", credID)
	if resp.Body != http.NoBody {
		resp.Body = &flushingBody{ReadCloser: resp.Body, upstream: up.r, guest: s.gw}
	}
	// The struct hides bufio.Writer's ReadFrom, which would hand the body
	// a slice of the very buffer flushingBody flushes.
	err := resp.Write(struct{ io.Writer }{s.gw})
	if err == nil {
		err = s.gw.Flush()
	}
	if err != nil || upstreamClose {
		s.dropUpstream()
	}
	if err != nil {
		return false, fmt.Errorf("intercept %s: relay response: %w", s.host, errors.Join(err, errdefs.ErrUnavailable))
	}
	return keep, nil
}

// frameForGuest sets how resp's body is delimited for the guest, and
// reports whether the connection can outlive it. A body of unknown length
// (chunked, or delimited by the upstream's close) is chunked for an
// HTTP/1.1 guest, and delimited by our close for an HTTP/1.0 one.
func frameForGuest(req *http.Request, resp *http.Response) bool {
	if resp.ContentLength >= 0 || req.Method == http.MethodHead || !bodyAllowed(resp.StatusCode) {
		return true
	}
	if req.ProtoAtLeast(1, 1) {
		resp.TransferEncoding = []string{"chunked"}
		return true
	}
	resp.TransferEncoding = nil
	resp.Trailer = nil
	return false
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// idempotent reports whether a request may be sent twice (RFC 9110 9.2.2,
// the methods net/http's Transport retries).
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// staleConn reports whether err looks like a server having closed an idle
// connection before reading the request: the connection ended before any
// byte of a response, with no timeout involved.
func staleConn(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}
