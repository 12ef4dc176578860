package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/api/node/v1/nodeapi/nodeapiv1connect"
	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/gateway"
	"github.com/spacesandbox/space/internal/gateway/intercept"
)

// CredentialClient asks the control plane for the credentials the gateway
// injects: the node holds no secret at rest, and every use is audited where
// the credentials live.
type CredentialClient struct {
	Server string // the control plane's base URL
	// Credential returns this node's own credential (Manager.Credential):
	// the control plane refuses the join token on this route.
	Credential func() string
	NodeID     string
	HTTP       *http.Client
}

// resolve asks for the credential of one request (or only whether one
// applies, when checkOnly).
func (c *CredentialClient) resolve(ctx context.Context, req nodev1.ResolveCredential) (*nodev1.ResolvedCredential, error) {
	var cred string
	if c.Credential != nil {
		cred = c.Credential()
	}
	if cred == "" {
		return nil, fmt.Errorf("credential for %s: node %s has no credential from the control plane yet (it comes with the first heartbeat answer): %w", req.Host, c.NodeID, errdefs.ErrUnavailable)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	client := nodeapiv1connect.NewControlPlaneServiceClient(hc, strings.TrimSuffix(c.Server, "/"), connect.WithReadMaxBytes(1<<20))
	creq := connect.NewRequest(req.ToWire(c.NodeID))
	creq.Header().Set("Authorization", "Bearer "+cred)
	resp, err := client.ResolveCredential(ctx, creq)
	if err != nil {
		return nil, controlPlaneError(c.Server, "credential for "+req.Host, err)
	}
	out := nodev1.ResolvedCredentialFromWire(resp.Msg)
	return &out, nil
}

// execCredentials is one execution's view of the credential client: the
// intercept.CredentialSource the interceptor resolves through.
type execCredentials struct {
	c               *CredentialClient
	sandbox, execID string
}

func (e execCredentials) Resolve(ctx context.Context, req credentials.Request) (*credentials.Credential, error) {
	r, err := e.c.resolve(ctx, nodev1.ResolveCredential{SandboxID: e.sandbox, ExecID: e.execID, Host: req.Host})
	if err != nil {
		return nil, err
	}
	return &credentials.Credential{
		ID: r.ID, Secret: r.Secret, AllowedHosts: []string{req.Host},
		Injection: credentials.Injection{Method: r.Method, Name: r.Name},
	}, nil
}

// RecordRedaction implements intercept.RedactionRecorder: the control
// plane, which keeps the credential audit log, records the redaction.
func (e execCredentials) RecordRedaction(ctx context.Context, r credentials.Redaction) error {
	_, err := e.c.resolve(ctx, nodev1.ResolveCredential{
		SandboxID: e.sandbox, ExecID: e.execID, Host: r.Host,
		Redaction: &nodev1.CredentialRedaction{CredentialID: r.CredentialID, Where: r.Where, Count: r.Count},
	})
	return err
}

// credentialInterceptor is the gateway.Interceptor of one execution.
type credentialInterceptor struct {
	base  intercept.Interceptor
	creds execCredentials

	// applies caches the control plane's answer per host for appliesTTL:
	// asking it on every TLS connection would put a round trip on the
	// sandbox's hot path. A credential created or deleted takes effect on
	// new connections within appliesTTL; every injected request is still
	// resolved (and audited, rate limited) one by one.
	mu      sync.Mutex
	applies map[string]appliesEntry
	now     func() time.Time
}

type appliesEntry struct {
	ok      bool
	expires time.Time
}

const (
	appliesTTL       = 10 * time.Second
	maxAppliesCached = 256
)

func (ci *credentialInterceptor) Applies(ctx context.Context, host string) bool {
	now := time.Now()
	if ci.now != nil {
		now = ci.now()
	}
	ci.mu.Lock()
	if e, ok := ci.applies[host]; ok && now.Before(e.expires) {
		ci.mu.Unlock()
		return e.ok
	}
	ci.mu.Unlock()
	r, err := ci.creds.c.resolve(ctx, nodev1.ResolveCredential{SandboxID: ci.creds.sandbox, ExecID: ci.creds.execID, Host: host, CheckOnly: true})
	if err != nil {
		// Not cached: the next connection asks again.
		return false
	}
	ci.mu.Lock()
	defer ci.mu.Unlock()
	if ci.applies == nil || len(ci.applies) >= maxAppliesCached {
		ci.applies = map[string]appliesEntry{}
	}
	ci.applies[host] = appliesEntry{ok: r.Applies, expires: now.Add(appliesTTL)}
	return r.Applies
}

func (ci *credentialInterceptor) Serve(ctx context.Context, client net.Conn, f gateway.Flow, dial func(context.Context) (net.Conn, error)) error {
	ic := ci.base
	ic.DialUpstream = dial
	return ic.Serve(ctx, client, intercept.Flow{Dst: f.Dst, ConnDomain: f.Domain, SNI: f.SNI})
}
