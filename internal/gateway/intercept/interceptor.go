package intercept

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Bounds on what one intercepted connection may send.
const (
	// MaxRequestHeaderBytes bounds a request line and its headers.
	MaxRequestHeaderBytes = 64 << 10
	// MaxResponseHeaderBytes bounds an upstream status line and headers.
	MaxResponseHeaderBytes = 1 << 20
	// max1xx bounds the informational responses relayed before a final one.
	max1xx = 16
)

// CredentialSource resolves the credential to inject into one request.
// *credentials.Manager satisfies it; errors follow Manager.Resolve, and the
// caller zeroes the credential it gets.
type CredentialSource interface {
	Resolve(ctx context.Context, req credentials.Request) (*credentials.Credential, error)
}

// Flow describes the TCP connection handed to Serve.
type Flow struct {
	// Dst is the address the guest connected to.
	Dst netip.AddrPort
	// ConnDomain is the domain the connection was allowed for (see
	// egress.Policy.AllowConnection), or "" for a raw-address connection.
	ConnDomain string
	// SNI is the server name of the guest's ClientHello, already read and
	// checked by the caller; "" when the guest sent none, in which case the
	// connection is intercepted for the address Dst.
	SNI string
}

// host returns the normalized name the guest's TLS session is for.
func (f Flow) host() (string, error) {
	if f.SNI != "" {
		return credentials.NormalizeHost(f.SNI)
	}
	if !f.Dst.IsValid() {
		return "", fmt.Errorf("flow has neither a server name nor a destination: %w", errdefs.ErrInvalidArgument)
	}
	return f.Dst.Addr().Unmap().WithZone("").String(), nil
}

// Timeouts bound each wait of an intercepted connection. A zero field takes
// its default.
type Timeouts struct {
	// Handshake bounds the TLS handshake with the guest, and the dial plus
	// TLS handshake with the upstream. Default 10s.
	Handshake time.Duration
	// Idle bounds the wait for the first byte of the guest's next request.
	// Default 2m.
	Idle time.Duration
	// RequestHeader bounds reading a request's line and headers once its
	// first byte has arrived. Default 30s.
	RequestHeader time.Duration
	// Inactivity bounds each silence while a body streams either way and
	// while the upstream prepares its response (model APIs can think for
	// minutes before the first byte). Default 10m.
	Inactivity time.Duration
}

func (t Timeouts) withDefaults() Timeouts {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.Handshake, 10*time.Second)
	def(&t.Idle, 2*time.Minute)
	def(&t.RequestHeader, 30*time.Second)
	def(&t.Inactivity, 10*time.Minute)
	return t
}

// Interceptor terminates the guest's TLS on connections whose host has a
// credential, and forwards each HTTP/1.1 request to the real upstream with
// the credential added. One Interceptor serves one sandbox; it is safe for
// concurrent use by many connections and holds no per-connection state.
type Interceptor struct {
	// CA mints the certificate the guest sees; the guest trusts CA.CertPEM.
	CA *CA
	// Policy is the sandbox's egress policy, consulted for every Host.
	Policy *egress.Holder
	// Credentials resolves the credential for each request.
	Credentials CredentialSource
	// DialUpstream dials the connection's real destination (Flow.Dst). It
	// is called at most once per guest connection at a time, when the first
	// request needs it, and again only after the upstream closed.
	DialUpstream func(ctx context.Context) (net.Conn, error)
	// UpstreamRoots verifies the upstream's certificate; nil uses the
	// system roots.
	UpstreamRoots *x509.CertPool
	// Identity is the sandbox asking (Tenant, Project, Sandbox,
	// ExecutionID), from the gateway's trusted state; Host is filled in
	// for each request.
	Identity credentials.Request
	// Log receives one record per request: the method, status and
	// credential id, never a header, a URL or a secret; and a warning per
	// redaction (credential id, where, count). Nil discards.
	Log *slog.Logger
	// Timeouts bounds every wait; zero fields take defaults.
	Timeouts Timeouts
	// Counters, if set, counts redactions and unscannable responses.
	Counters *Counters
}

func (ic *Interceptor) validate() error {
	switch {
	case ic.CA == nil:
		return fmt.Errorf("interceptor has no CA: %w", errdefs.ErrFailedPrecondition)
	case ic.Policy == nil:
		return fmt.Errorf("interceptor has no egress policy: %w", errdefs.ErrFailedPrecondition)
	case ic.Credentials == nil:
		return fmt.Errorf("interceptor has no credential source: %w", errdefs.ErrFailedPrecondition)
	case ic.DialUpstream == nil:
		return fmt.Errorf("interceptor has no upstream dialer: %w", errdefs.ErrFailedPrecondition)
	}
	return nil
}

func (ic *Interceptor) logger() *slog.Logger {
	if ic.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return ic.Log
}

// Serve intercepts one connection: it completes the TLS handshake as the
// server named by flow.SNI (offering only HTTP/1.1 by ALPN), then reads the
// guest's requests one at a time and forwards each to the upstream, adding
// the credential (see the package doc). client replays the ClientHello the
// caller peeked at. Serve closes client before returning, and returns when
// the guest closes the connection, stays idle past Timeouts.Idle, a request
// is refused or fails, or ctx is done.
//
// The error is nil after a clean close or an idle timeout, and ctx's error
// (context.Cause) when ctx ended the connection. Otherwise it
// says why the connection ended, and its class says who was at fault:
// ErrInvalidArgument for a malformed or unsupported request,
// ErrPermissionDenied for a Host the policy or the server name refuses,
// ErrResourceExhausted for a rate-limited credential, ErrFailedPrecondition
// for an expired one, ErrUnavailable for an upstream or credential store
// failure. When the guest could still be answered, it was.
func (ic *Interceptor) Serve(ctx context.Context, client net.Conn, flow Flow) error {
	defer client.Close()
	if err := ic.validate(); err != nil {
		return err
	}
	host, err := flow.host()
	if err != nil {
		return fmt.Errorf("intercept %s: %w", flow.Dst, err)
	}
	cert, err := ic.CA.Certificate(host)
	if err != nil {
		return fmt.Errorf("intercept %s: %w", host, err)
	}
	conn := tls.Server(client, &tls.Config{
		Certificates: []tls.Certificate{*cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	defer conn.Close()
	hctx, cancel := context.WithTimeout(ctx, ic.Timeouts.withDefaults().Handshake)
	err = conn.HandshakeContext(hctx)
	cancel()
	if ctx.Err() != nil {
		return fmt.Errorf("intercept %s: %w", host, context.Cause(ctx))
	}
	if err != nil {
		return fmt.Errorf("intercept %s: TLS handshake with the guest: %w", host, errors.Join(err, errdefs.ErrInvalidArgument))
	}
	err = ic.serveHTTP(ctx, conn, flow, host)
	if ctx.Err() != nil {
		return fmt.Errorf("intercept %s: %w", host, context.Cause(ctx))
	}
	return err
}
