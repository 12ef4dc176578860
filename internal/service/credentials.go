package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/keylock"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// Credentials live in two places: the secret with its metadata in the
// credential backend (an encrypted vault), where the credential manager
// resolves it for the gateways, and the metadata alone in the database's
// credential index (store.Credentials), which answers the listings per
// tenant and remembers when each was made. A create writes the index first
// and the backend second (undoing the index when the backend fails); a
// delete removes from the backend first. So a credential the backend can
// hand out is always listed and deletable.
//
// No value returned, log line or event ever contains a secret:
// credentials.Credential keeps it out of its String, slog value and JSON,
// and Create zeroes it before returning.

// AuditReader reads the credential audit log back (credentials.FileAuditLog).
type AuditReader interface {
	Query(ctx context.Context, q credentials.AuditQuery) ([]credentials.AuditEntry, error)
}

// ErrNoCredentials answers the credential operations of a control plane
// without a credential backend.
var ErrNoCredentials = fmt.Errorf("%w: this server has no credential store configured", errdefs.ErrUnavailable)

// Credentials runs the operations on credentials. Each is about the
// caller's tenant or, for an admin, the tenant it names (asked; "": the
// caller's).
type Credentials struct {
	store   store.Store
	backend credentials.Backend // nil: no credential backend
	audit   AuditReader         // nil: no audit log
	log     *slog.Logger
	// ruleLocks serialises the header-rule changes of each sandbox
	// (headerrules.go).
	ruleLocks keylock.Map
}

// NewCredentials returns the credential operations over the index in st,
// the secrets in backend and the audit log audit (either nil when the
// control plane has none).
func NewCredentials(st store.Store, backend credentials.Backend, audit AuditReader, log *slog.Logger) *Credentials {
	return &Credentials{store: st, backend: backend, audit: audit, log: log}
}

// newCredentialID returns a fresh credential id, "cr-" and 20 hex digits.
func newCredentialID() string {
	b := make([]byte, 10)
	rand.Read(b)
	return "cr-" + hex.EncodeToString(b)
}

// Available is ErrNoCredentials when the control plane has no credential
// backend, nil otherwise.
func (s *Credentials) Available() error {
	if s.backend == nil {
		return ErrNoCredentials
	}
	return nil
}

// Create records the credential req asks for, for the tenant req names
// (asked), and returns it (its secret zeroed) with when it was recorded.
func (s *Credentials) Create(ctx context.Context, c Caller, req sandboxv1.CreateCredentialRequest) (credentials.Credential, time.Time, error) {
	if err := s.Available(); err != nil {
		return credentials.Credential{}, time.Time{}, err
	}
	tenant, err := TenantFor(ctx, s.store, c, req.Tenant)
	if err != nil {
		return credentials.Credential{}, time.Time{}, err
	}
	cred, err := s.fromRequest(ctx, tenant, req)
	defer cred.Zero()
	if err != nil {
		return credentials.Credential{}, time.Time{}, err
	}
	meta, err := json.Marshal(cred.Metadata())
	if err != nil {
		return credentials.Credential{}, time.Time{}, fmt.Errorf("credential %s: encode metadata: %w", cred.ID, err)
	}
	row := store.Credential{ID: cred.ID, Tenant: tenant, Project: cred.Scope.Project, Sandbox: cred.Scope.Sandbox,
		Name: cred.Name, Metadata: string(meta), CreatedAt: time.Now().UTC()}
	if err := s.store.CreateCredential(ctx, row); err != nil {
		return credentials.Credential{}, time.Time{}, err
	}
	if err := s.backend.Put(ctx, cred); err != nil {
		if derr := s.store.DeleteCredential(context.WithoutCancel(ctx), cred.ID); derr != nil {
			s.log.Warn("undo credential index entry", "credential", cred.ID, "err", derr)
		}
		return credentials.Credential{}, time.Time{}, fmt.Errorf("credential %s: store: %w", cred.ID, err)
	}
	s.log.Info("credential created", "credential", cred, "by_key", c.KeyID)
	out := cred
	out.Secret = nil
	return out, row.CreatedAt, nil
}

// fromRequest builds and validates the credential a create asks for.
// Every error is ErrInvalidArgument (ErrNotFound for a sandbox that is not
// the tenant's) and never quotes the secret.
func (s *Credentials) fromRequest(ctx context.Context, tenant string, req sandboxv1.CreateCredentialRequest) (credentials.Credential, error) {
	c := credentials.Credential{
		ID:           newCredentialID(),
		Scope:        credentials.Scope{Tenant: tenant, Project: req.Project, Sandbox: req.Sandbox},
		Name:         req.Name,
		Secret:       []byte(req.Secret),
		Injection:    credentials.Injection{Method: req.Injection.Method, Name: req.Injection.Name},
		AllowedHosts: req.AllowedHosts,
		RateLimit:    req.RateLimit,
	}
	if req.ExpiresAt != nil {
		if !req.ExpiresAt.After(time.Now()) {
			return c, fmt.Errorf("%w: expires_at %s is not in the future", errdefs.ErrInvalidArgument, req.ExpiresAt.Format(time.RFC3339))
		}
		c.ExpiresAt = req.ExpiresAt.UTC()
	}
	if req.Project != "" {
		if err := sandbox.ValidateProject(req.Project); err != nil {
			return c, err
		}
	}
	if req.Sandbox != "" {
		notFound := fmt.Errorf("%w: sandbox %q", errdefs.ErrNotFound, Clip(req.Sandbox))
		if !sandbox.ValidID(req.Sandbox) {
			return c, notFound
		}
		sb, err := s.store.GetSandbox(ctx, tenant, req.Sandbox)
		if errors.Is(err, errdefs.ErrNotFound) || err == nil && sb.State == sandbox.StateDeleted {
			return c, notFound
		} else if err != nil {
			return c, err
		}
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// List returns the index entries of the tenant's credentials.
func (s *Credentials) List(ctx context.Context, c Caller, asked string) ([]store.Credential, error) {
	tenant, err := TenantFor(ctx, s.store, c, asked)
	if err != nil {
		return nil, err
	}
	return s.store.ListCredentials(ctx, tenant)
}

// Get returns credential id's index entry; another tenant's is NotFound,
// like a missing one.
func (s *Credentials) Get(ctx context.Context, c Caller, asked, id string) (store.Credential, error) {
	tenant, err := TenantFor(ctx, s.store, c, asked)
	if err != nil {
		return store.Credential{}, err
	}
	row, err := s.store.GetCredential(ctx, tenant, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return row, fmt.Errorf("%w: credential %q", errdefs.ErrNotFound, Clip(id))
	}
	return row, err
}

// Delete deletes credential id of the tenant.
func (s *Credentials) Delete(ctx context.Context, c Caller, asked, id string) error {
	if err := s.Available(); err != nil {
		return err
	}
	row, err := s.Get(ctx, c, asked, id)
	if err != nil {
		return err
	}
	if err := s.delete(ctx, row.ID); err != nil {
		return err
	}
	s.log.Info("credential deleted", "credential", row.ID, "tenant", row.Tenant, "by_key", c.KeyID)
	return nil
}

// delete removes a credential from the backend, then its index entry;
// either being gone already is fine.
func (s *Credentials) delete(ctx context.Context, id string) error {
	if err := s.backend.Delete(ctx, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("credential %s: delete: %w", id, err)
	}
	if err := s.store.DeleteCredential(ctx, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return nil
}

// PurgeTenant deletes every credential of a deleted tenant, logging (not
// returning) a failure.
func (s *Credentials) PurgeTenant(ctx context.Context, tenant string) {
	if s.backend == nil {
		return
	}
	rows, err := s.store.ListCredentials(ctx, tenant)
	if err == nil {
		for _, row := range rows {
			if err = s.delete(ctx, row.ID); err != nil {
				break
			}
		}
	}
	if err != nil {
		s.log.Warn("delete the credentials of a deleted tenant", "tenant", tenant, "err", err)
	}
}

// AuditTenant is the tenant whose audit entries the caller may read
// (asked, for an admin), or ErrNoCredentials without an audit log.
func (s *Credentials) AuditTenant(ctx context.Context, c Caller, asked string) (string, error) {
	if s.audit == nil {
		return "", ErrNoCredentials
	}
	return TenantFor(ctx, s.store, c, asked)
}

// Audit returns the audit entries q selects; q.Tenant is AuditTenant's.
func (s *Credentials) Audit(ctx context.Context, q credentials.AuditQuery) ([]credentials.AuditEntry, error) {
	if s.audit == nil {
		return nil, ErrNoCredentials
	}
	return s.audit.Query(ctx, q)
}

// TenantFor is the tenant a request by c about tenant asked is for: c's
// own when asked is "" or c's; another only for an admin, and only one that
// exists.
func TenantFor(ctx context.Context, st store.Store, c Caller, asked string) (string, error) {
	if asked == "" || asked == c.Tenant {
		return c.Tenant, nil
	}
	if !c.Admin {
		return "", fmt.Errorf("%w: only the admin key manages other tenants' keys", errdefs.ErrPermissionDenied)
	}
	if _, err := st.GetTenant(ctx, asked); err != nil {
		return "", err
	}
	return asked, nil
}
