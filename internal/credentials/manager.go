package credentials

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Request asks for the credential to inject into one outgoing request.
type Request struct {
	// Tenant, Project (optional) and Sandbox (optional) are the sandbox's
	// identity, from the gateway's trusted state, never from the guest.
	Tenant  string
	Project string
	Sandbox string
	// ExecutionID names the execution of the sandbox making the request;
	// it is recorded, not matched.
	ExecutionID string
	// Host is the destination: a DNS name or IP address, without a port.
	Host string
}

// Reasons recorded in AuditEntry.Reason.
const (
	ReasonResolved     = "resolved"
	ReasonInvalid      = "invalid request"
	ReasonBackend      = "backend unavailable"
	ReasonNoCredential = "no credential in scope"
	ReasonHostMismatch = "no credential in scope allows this host"
	ReasonExpired      = "every credential for this host has expired"
	ReasonRateLimited  = "rate limited"
)

// Manager resolves credentials from a Backend for the gateway. It is safe
// for concurrent use.
type Manager struct {
	backend Backend
	audit   AuditLog
	now     func() time.Time
	limits  limiter
}

// ManagerOption configures a Manager.
type ManagerOption func(*Manager)

// WithClock replaces time.Now, for tests of expiry and rate limits.
func WithClock(now func() time.Time) ManagerOption {
	return func(m *Manager) { m.now = now }
}

// NewManager returns a Manager over backend that records every Resolve in
// audit.
func NewManager(backend Backend, audit AuditLog, opts ...ManagerOption) *Manager {
	m := &Manager{backend: backend, audit: audit, now: time.Now}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Resolve returns the credential to inject into req, and records the
// attempt in the audit log whatever the outcome.
//
// The candidates are the credentials whose scope covers the sandbox and one
// of whose AllowedHosts matches req.Host. Expired candidates are dropped, so
// an expired sandbox credential lets a live project or tenant one for the
// same host apply: that one was granted to this sandbox too. Among the rest
// the most specific scope wins (sandbox > project > tenant), then the most
// specific host match (exact > longer wildcard), then the smallest id. The
// winner's rate limit is then charged; a limited credential does not fall
// back to a broader one.
//
// Errors: ErrInvalidArgument for a malformed request, ErrNotFound when no
// credential is in scope, ErrPermissionDenied when credentials are in scope
// but none allows the host, ErrFailedPrecondition when all that allow it
// have expired, ErrResourceExhausted when rate limited, ErrUnavailable when
// the backend or the audit log fails (no credential is handed out without
// its audit entry). The caller owns the result and should Zero it after use.
func (m *Manager) Resolve(ctx context.Context, req Request) (*Credential, error) {
	entry := AuditEntry{
		Tenant: bound(req.Tenant), Project: bound(req.Project), Sandbox: bound(req.Sandbox),
		ExecutionID: bound(req.ExecutionID), Host: bound(req.Host),
	}
	cred, reason, err := m.resolve(ctx, req, &entry)
	entry.Time = m.now()
	entry.Allowed = err == nil
	entry.Reason = reason
	if aerr := m.audit.Record(ctx, entry); aerr != nil {
		if cred != nil {
			cred.Zero()
		}
		return nil, fmt.Errorf("credential for %s: audit log: %w", entry.Host, errors.Join(aerr, errdefs.ErrUnavailable))
	}
	if err != nil {
		return nil, err
	}
	return cred, nil
}

// Applies reports whether a credential would apply to a request for
// req.Host: whether any unexpired credential whose scope covers the sandbox
// allows the host. The gateway asks it once per connection to decide
// whether to intercept TLS at all, so it hands out no secret, charges no
// rate limit and writes no audit entry; Resolve audits each actual use. A
// rate-limited credential still applies (Resolve then refuses the request);
// a host whose every credential has expired does not.
//
// Errors: ErrInvalidArgument for a malformed request, ErrUnavailable when
// the backend fails.
func (m *Manager) Applies(ctx context.Context, req Request) (bool, error) {
	host, err := req.validate()
	if err != nil {
		return false, fmt.Errorf("credential applies: %w", err)
	}
	inScope, err := m.candidates(ctx, req)
	if err != nil {
		return false, err
	}
	defer func() {
		for i := range inScope {
			inScope[i].Zero()
		}
	}()
	now := m.now()
	for i := range inScope {
		c := &inScope[i]
		if !c.Expired(now) && matchHosts(c.AllowedHosts, host) >= 0 {
			return true, nil
		}
	}
	return false, nil
}

// resolve decides; Resolve records. entry gets the chosen credential's id.
func (m *Manager) resolve(ctx context.Context, req Request, entry *AuditEntry) (*Credential, string, error) {
	host, err := req.validate()
	if err != nil {
		return nil, ReasonInvalid, fmt.Errorf("resolve credential: %w", err)
	}
	entry.Host = host
	inScope, err := m.candidates(ctx, req)
	if err != nil {
		return nil, ReasonBackend, err
	}
	defer func() {
		for i := range inScope {
			inScope[i].Zero()
		}
	}()
	if len(inScope) == 0 {
		return nil, ReasonNoCredential, fmt.Errorf("sandbox %s of tenant %s: no credential in scope: %w", req.Sandbox, req.Tenant, errdefs.ErrNotFound)
	}
	now := m.now()
	var best *Credential
	bestRank, matched := -1, 0
	for i := range inScope {
		c := &inScope[i]
		hostRank := matchHosts(c.AllowedHosts, host)
		if hostRank < 0 {
			continue
		}
		matched++
		if c.Expired(now) {
			continue
		}
		rank := c.Scope.Specificity()<<20 | hostRank
		if rank > bestRank || rank == bestRank && c.ID < best.ID {
			best, bestRank = c, rank
		}
	}
	switch {
	case matched == 0:
		return nil, ReasonHostMismatch, fmt.Errorf("sandbox %s of tenant %s: no credential in scope allows host %s: %w", req.Sandbox, req.Tenant, host, errdefs.ErrPermissionDenied)
	case best == nil:
		return nil, ReasonExpired, fmt.Errorf("sandbox %s of tenant %s: every credential for host %s has expired; renew it: %w", req.Sandbox, req.Tenant, host, errdefs.ErrFailedPrecondition)
	}
	entry.CredentialID = best.ID
	if !m.limits.allow(best.ID, best.RateLimit, now) {
		return nil, ReasonRateLimited, fmt.Errorf("credential %s: more than %d uses per minute: %w", best.ID, best.RateLimit, errdefs.ErrRateLimited)
	}
	out := best.Clone()
	return &out, ReasonResolved, nil
}

// candidates lists every credential whose scope covers the request's
// sandbox: tenant-wide, project-wide, and sandbox ones with and without the
// project.
func (m *Manager) candidates(ctx context.Context, req Request) ([]Credential, error) {
	scopes := []Scope{{Tenant: req.Tenant}}
	if req.Project != "" {
		scopes = append(scopes, Scope{Tenant: req.Tenant, Project: req.Project})
	}
	if req.Sandbox != "" {
		scopes = append(scopes, Scope{Tenant: req.Tenant, Sandbox: req.Sandbox})
		if req.Project != "" {
			scopes = append(scopes, Scope{Tenant: req.Tenant, Project: req.Project, Sandbox: req.Sandbox})
		}
	}
	var out []Credential
	for _, s := range scopes {
		cs, err := m.backend.List(ctx, s)
		if err != nil {
			for i := range out {
				out[i].Zero()
			}
			return nil, fmt.Errorf("list credentials of scope %s: %w", s, errors.Join(err, errdefs.ErrUnavailable))
		}
		for _, c := range cs {
			if c.Scope.Covers(req.Tenant, req.Project, req.Sandbox) {
				out = append(out, c)
			} else {
				c.Zero() // a backend that ignored the filter
			}
		}
	}
	slices.SortFunc(out, func(a, b Credential) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// validate checks the request and returns its normalized host.
func (r Request) validate() (string, error) {
	s := Scope{Tenant: r.Tenant, Project: r.Project, Sandbox: r.Sandbox}
	if err := s.Validate(); err != nil {
		return "", err
	}
	if r.ExecutionID != "" {
		if err := validID("execution id", r.ExecutionID); err != nil {
			return "", err
		}
	}
	return NormalizeHost(r.Host)
}

// bound cuts an unvalidated string to a size fit for an audit line.
func bound(s string) string {
	const max = 256
	if len(s) > max {
		return s[:max]
	}
	return s
}

// Redaction reports that the gateway removed a credential's secret from a
// response on its way to the sandbox.
type Redaction struct {
	// Request names the sandbox and the host the response came from.
	Request
	// CredentialID is the credential whose secret was found.
	CredentialID string
	// Where is "header", "body" or "header,body" (AuditEntry.Where).
	Where string
	// Count is how many occurrences were removed; at least 1.
	Count int
}

// ReasonRedacted is the Reason of a KindRedaction entry.
const ReasonRedacted = "secret removed from the response"

// RecordRedaction writes a KindRedaction entry for r. Like Resolve it fails
// closed: the error is ErrUnavailable when the audit log cannot record the
// entry, and the gateway then cuts the response it was redacting.
// ErrInvalidArgument for a malformed report.
func (m *Manager) RecordRedaction(ctx context.Context, r Redaction) error {
	host, err := r.Request.validate()
	if err != nil {
		return fmt.Errorf("record redaction: %w", err)
	}
	if err := validID("credential id", r.CredentialID); err != nil {
		return fmt.Errorf("record redaction: %w", err)
	}
	switch r.Where {
	case "header", "body", "header,body":
	default:
		return fmt.Errorf("record redaction: where %.32q, want header, body or header,body: %w", r.Where, errdefs.ErrInvalidArgument)
	}
	if r.Count < 1 {
		return fmt.Errorf("record redaction: count %d, want at least 1: %w", r.Count, errdefs.ErrInvalidArgument)
	}
	entry := AuditEntry{
		Kind: KindRedaction, Time: m.now(),
		Tenant: r.Tenant, Project: r.Project, Sandbox: r.Sandbox, ExecutionID: r.ExecutionID,
		Host: host, CredentialID: r.CredentialID, Reason: ReasonRedacted, Where: r.Where, Count: r.Count,
	}
	if err := m.audit.Record(ctx, entry); err != nil {
		return fmt.Errorf("credential %s: redaction from %s: audit log: %w", r.CredentialID, host, errors.Join(err, errdefs.ErrUnavailable))
	}
	return nil
}
