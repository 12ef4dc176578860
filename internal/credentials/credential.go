// Package credentials owns the credential manager the gateway uses to inject
// secrets into a sandbox's outgoing requests without the sandbox ever seeing
// them: the Credential type and its injection metadata, the Backend contract
// of pluggable vault backends (credentials/localstore is the first), and the
// Manager that resolves one credential for a request through hierarchical
// scopes (sandbox > project > tenant), allowed hosts, expiry and per-credential
// rate limits, writing an AuditLog entry for every attempt.
//
// A secret never appears in a Credential's String, its slog value, its JSON
// (the Secret field is tagged "-") or an audit entry. Backends serialise it
// through their own record types.
package credentials

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Limits every credential is validated against.
const (
	MaxIDLen     = 128
	MaxSecretLen = 64 << 10
	// MinSecretLen is the shortest secret accepted: the gateway removes
	// the secret from every response on a flow it was injected into, and
	// a shorter one would match ordinary text.
	MinSecretLen       = 8
	MaxAllowedHosts    = 64
	MaxRateLimit       = 1_000_000
	maxInjectionName   = 128
	maxCredentialBytes = MaxSecretLen + 16<<10 // a generous bound on one serialised credential
)

// Scope says who may use a credential. Tenant is required; Project and
// Sandbox narrow it. A credential with Sandbox set applies only to that
// sandbox, with Project set (and no Sandbox) to every sandbox of that project,
// with neither to every sandbox of the tenant.
type Scope struct {
	Tenant  string `json:"tenant"`
	Project string `json:"project,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
}

// Specificity ranks a scope for precedence: 0 tenant, 1 project, 2 sandbox,
// 3 sandbox within a project.
func (s Scope) Specificity() int {
	n := 0
	if s.Sandbox != "" {
		n += 2
	}
	if s.Project != "" {
		n++
	}
	return n
}

// Covers reports whether a credential of scope s applies to a sandbox of
// the given tenant, project and sandbox id.
func (s Scope) Covers(tenant, project, sandbox string) bool {
	return s.Tenant == tenant &&
		(s.Project == "" || s.Project == project) &&
		(s.Sandbox == "" || s.Sandbox == sandbox)
}

// String renders the scope as tenant[/project][#sandbox].
func (s Scope) String() string {
	out := s.Tenant
	if s.Project != "" {
		out += "/" + s.Project
	}
	if s.Sandbox != "" {
		out += "#" + s.Sandbox
	}
	return out
}

// Validate checks every field's shape; the error is ErrInvalidArgument.
func (s Scope) Validate() error {
	if err := validID("tenant", s.Tenant); err != nil {
		return err
	}
	if s.Project != "" {
		if err := validID("project", s.Project); err != nil {
			return err
		}
	}
	if s.Sandbox != "" {
		if err := validID("sandbox", s.Sandbox); err != nil {
			return err
		}
	}
	return nil
}

// Injection methods.
const (
	// MethodHeader sets the HTTP header Injection.Name to the secret.
	MethodHeader = "header"
	// MethodBasic sets "Authorization: Basic" from a secret of the form
	// "user:password".
	MethodBasic = "basic"
	// MethodQuery sets the URL query parameter Injection.Name to the secret.
	MethodQuery = "query"
	// MethodHeaders sets several HTTP headers: Injection.Name lists their
	// names joined by commas, the secret their values in the same order
	// joined by newlines (a header value holds neither). E2B's network.rules
	// set several headers on one host (service.HeaderRule).
	MethodHeaders = "headers"
)

// MaxInjectedHeaders bounds the headers of one MethodHeaders credential.
const MaxInjectedHeaders = 16

// InjectedHeaders splits a MethodHeaders credential into its header names
// and values (views of c.Secret: zeroing the secret zeroes them). The
// error says what does not match and never contains a value.
func (c *Credential) InjectedHeaders() (names []string, values [][]byte, err error) {
	if c.Injection.Method != MethodHeaders {
		return nil, nil, fmt.Errorf("injection method %.32q is not %s: %w", c.Injection.Method, MethodHeaders, errdefs.ErrInvalidArgument)
	}
	names = strings.Split(c.Injection.Name, ",")
	values = bytes.Split(c.Secret, []byte("\n"))
	if len(names) != len(values) {
		return nil, nil, fmt.Errorf("%d header names and %d values: %w", len(names), len(values), errdefs.ErrInvalidArgument)
	}
	return names, values, nil
}

// Injection says how the gateway adds the secret to a request.
type Injection struct {
	// Method is MethodHeader, MethodBasic, MethodQuery or MethodHeaders.
	Method string `json:"method"`
	// Name is the header name (MethodHeader), the query parameter name
	// (MethodQuery) or the comma-joined header names (MethodHeaders);
	// empty for MethodBasic.
	Name string `json:"name,omitempty"`
}

// Credential is one secret with the metadata that governs its use.
type Credential struct {
	// ID names the credential uniquely across the backend.
	ID string `json:"id"`
	// Scope says which sandboxes may use it.
	Scope Scope `json:"scope"`
	// Name is the user's label for it ("github-token").
	Name string `json:"name"`
	// Secret is the value injected. It is never logged, printed or encoded
	// by this package; Zero clears it.
	Secret []byte `json:"-"`
	// Injection says how the secret is added to a request.
	Injection Injection `json:"injection"`
	// AllowedHosts are the hosts the secret may be sent to: exact names or
	// IP addresses, or "*.suffix" for any name below suffix (not suffix
	// itself). Matching ignores case and one trailing dot.
	AllowedHosts []string `json:"allowed_hosts"`
	// ExpiresAt is when the credential stops resolving; zero never expires.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// RateLimit is the most resolutions per minute (a token bucket with a
	// burst of the same size); 0 means unlimited.
	RateLimit int `json:"rate_limit,omitempty"`
}

// String describes the credential without its secret.
func (c Credential) String() string {
	return fmt.Sprintf("credential %s (%q, scope %s, %s, hosts %v, secret %d bytes redacted)",
		c.ID, c.Name, c.Scope, c.Injection.Method, c.AllowedHosts, len(c.Secret))
}

// GoString keeps the secret out of %#v.
func (c Credential) GoString() string { return c.String() }

// LogValue keeps the secret out of slog output.
func (c Credential) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("id", c.ID),
		slog.String("name", c.Name),
		slog.String("scope", c.Scope.String()),
		slog.String("method", c.Injection.Method),
		slog.Any("allowed_hosts", c.AllowedHosts),
		slog.String("secret", "REDACTED"))
}

// Metadata returns a copy without the secret, for listings.
func (c Credential) Metadata() Credential {
	m := c.Clone()
	m.Zero()
	m.Secret = nil
	return m
}

// Clone returns a deep copy, secret included.
func (c Credential) Clone() Credential {
	out := c
	out.Secret = append([]byte(nil), c.Secret...)
	out.AllowedHosts = append([]string(nil), c.AllowedHosts...)
	return out
}

// Zero overwrites the secret's bytes in place (they are shared by every
// copy of c that was not made with Clone). Copies made earlier (by
// Clone, a backend or the gateway) are their holders' to zero.
func (c Credential) Zero() { clear(c.Secret) }

// Expired reports whether the credential has expired at now.
func (c Credential) Expired(now time.Time) bool {
	return !c.ExpiresAt.IsZero() && !now.Before(c.ExpiresAt)
}

// Validate checks every field; the error is ErrInvalidArgument and never
// quotes the secret.
func (c Credential) Validate() error {
	if err := validID("credential id", c.ID); err != nil {
		return err
	}
	if err := c.Scope.Validate(); err != nil {
		return fmt.Errorf("credential %s: %w", c.ID, err)
	}
	if err := validName(c.Name); err != nil {
		return fmt.Errorf("credential %s: %w", c.ID, err)
	}
	if err := c.validSecret(); err != nil {
		return fmt.Errorf("credential %s: %w", c.ID, err)
	}
	if len(c.AllowedHosts) == 0 || len(c.AllowedHosts) > MaxAllowedHosts {
		return fmt.Errorf("credential %s: %d allowed hosts, want 1 to %d: %w",
			c.ID, len(c.AllowedHosts), MaxAllowedHosts, errdefs.ErrInvalidArgument)
	}
	for _, h := range c.AllowedHosts {
		if err := ValidHostPattern(h); err != nil {
			return fmt.Errorf("credential %s: %w", c.ID, err)
		}
	}
	if c.RateLimit < 0 || c.RateLimit > MaxRateLimit {
		return fmt.Errorf("credential %s: rate limit %d per minute, want 0 (none) to %d: %w",
			c.ID, c.RateLimit, MaxRateLimit, errdefs.ErrInvalidArgument)
	}
	return nil
}
