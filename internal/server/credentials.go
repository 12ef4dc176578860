package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// Credentials live in two places: the secret with its metadata in the
// credential backend (Config.CredentialStore, an encrypted vault), where the
// credential manager resolves it for the gateways, and the metadata alone in
// the database's credential index (store.Credentials), which answers the
// listings per tenant and remembers when each was made. A create writes the
// index first and the backend second (undoing the index when the backend
// fails); a delete removes from the backend first. So a credential the
// backend can hand out is always listed and deletable.
//
// No response, log line or event ever contains a secret: the API types have
// no field for it, and credentials.Credential keeps it out of its String,
// slog value and JSON.

// AuditReader reads the credential audit log back (credentials.FileAuditLog).
type AuditReader interface {
	Query(ctx context.Context, q credentials.AuditQuery) ([]credentials.AuditEntry, error)
}

var errNoCredentials = fmt.Errorf("%w: this server has no credential store configured", errdefs.ErrUnavailable)

// newCredentialID returns a fresh credential id, "cr-" and 20 hex digits.
func newCredentialID() string {
	b := make([]byte, 10)
	rand.Read(b)
	return "cr-" + hex.EncodeToString(b)
}

func credentialAPI(c credentials.Credential, created time.Time) sandboxv1.Credential {
	out := sandboxv1.Credential{
		ID: c.ID, Name: c.Name,
		Scope:        sandboxv1.CredentialScope{Tenant: c.Scope.Tenant, Project: c.Scope.Project, Sandbox: c.Scope.Sandbox},
		Injection:    sandboxv1.CredentialInjection{Method: c.Injection.Method, Name: c.Injection.Name},
		AllowedHosts: append([]string{}, c.AllowedHosts...),
		RateLimit:    c.RateLimit, CreatedAt: created,
	}
	if !c.ExpiresAt.IsZero() {
		t := c.ExpiresAt.UTC()
		out.ExpiresAt = &t
	}
	return out
}

// indexAPI decodes an index row into its API form.
func indexAPI(row store.Credential) (sandboxv1.Credential, error) {
	var c credentials.Credential
	if err := json.Unmarshal([]byte(row.Metadata), &c); err != nil {
		return sandboxv1.Credential{}, fmt.Errorf("credential %s: decode stored metadata: %w", row.ID, err)
	}
	c.ID, c.Name = row.ID, row.Name
	c.Scope = credentials.Scope{Tenant: row.Tenant, Project: row.Project, Sandbox: row.Sandbox}
	return credentialAPI(c, row.CreatedAt), nil
}

// credentialFromRequest builds and validates the credential a create asks
// for. Every error is ErrInvalidArgument (ErrNotFound for a sandbox that is
// not the tenant's) and never quotes the secret.
func (s *Server) credentialFromRequest(ctx context.Context, tenant string, req sandboxv1.CreateCredentialRequest) (credentials.Credential, error) {
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
		notFound := fmt.Errorf("%w: sandbox %q", errdefs.ErrNotFound, clip(req.Sandbox))
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

func (s *Server) handleCreateCredential(w http.ResponseWriter, r *http.Request) {
	if s.cfg.CredentialStore == nil {
		s.writeError(w, r, errNoCredentials)
		return
	}
	var req sandboxv1.CreateCredentialRequest
	if err := decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	tenant, err := s.keyTenant(r, req.Tenant)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	c, err := s.credentialFromRequest(r.Context(), tenant, req)
	defer c.Zero()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	meta, err := json.Marshal(c.Metadata())
	if err != nil {
		s.writeError(w, r, fmt.Errorf("credential %s: encode metadata: %w", c.ID, err))
		return
	}
	row := store.Credential{ID: c.ID, Tenant: tenant, Project: c.Scope.Project, Sandbox: c.Scope.Sandbox,
		Name: c.Name, Metadata: string(meta), CreatedAt: time.Now().UTC()}
	if err := s.store.CreateCredential(r.Context(), row); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.cfg.CredentialStore.Put(r.Context(), c); err != nil {
		if derr := s.store.DeleteCredential(context.WithoutCancel(r.Context()), c.ID); derr != nil {
			s.log.Warn("undo credential index entry", "credential", c.ID, "err", derr)
		}
		s.writeError(w, r, fmt.Errorf("credential %s: store: %w", c.ID, err))
		return
	}
	s.log.Info("credential created", "credential", c, "by_key", callerOf(r.Context()).KeyID)
	writeJSON(w, http.StatusCreated, credentialAPI(c, row.CreatedAt))
}

// credentialTenant is the tenant a credential request is about: the
// caller's, or with the admin key the ?tenant= one.
func (s *Server) credentialTenant(r *http.Request) (string, error) {
	return s.keyTenant(r, r.URL.Query().Get("tenant"))
}

func (s *Server) handleListCredentials(w http.ResponseWriter, r *http.Request) {
	tenant, err := s.credentialTenant(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rows, err := s.store.ListCredentials(r.Context(), tenant)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := sandboxv1.CredentialList{Credentials: []sandboxv1.Credential{}}
	for _, row := range rows {
		c, err := indexAPI(row)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		out.Credentials = append(out.Credentials, c)
	}
	writeJSON(w, http.StatusOK, out)
}

// credentialFor loads the {id} credential's index entry for the request's
// tenant; another tenant's is NotFound, like a missing one.
func (s *Server) credentialFor(r *http.Request) (store.Credential, error) {
	tenant, err := s.credentialTenant(r)
	if err != nil {
		return store.Credential{}, err
	}
	id := r.PathValue("id")
	row, err := s.store.GetCredential(r.Context(), tenant, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return row, fmt.Errorf("%w: credential %q", errdefs.ErrNotFound, clip(id))
	}
	return row, err
}

func (s *Server) handleGetCredential(w http.ResponseWriter, r *http.Request) {
	row, err := s.credentialFor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	c, err := indexAPI(row)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (s *Server) handleDeleteCredential(w http.ResponseWriter, r *http.Request) {
	if s.cfg.CredentialStore == nil {
		s.writeError(w, r, errNoCredentials)
		return
	}
	row, err := s.credentialFor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.deleteCredential(r.Context(), row.ID); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("credential deleted", "credential", row.ID, "tenant", row.Tenant, "by_key", callerOf(r.Context()).KeyID)
	w.WriteHeader(http.StatusNoContent)
}

// deleteCredential removes a credential from the backend, then its index
// entry; either being gone already is fine.
func (s *Server) deleteCredential(ctx context.Context, id string) error {
	if err := s.cfg.CredentialStore.Delete(ctx, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("credential %s: delete: %w", id, err)
	}
	if err := s.store.DeleteCredential(ctx, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return nil
}

// purgeCredentials deletes every credential of a deleted tenant.
func (s *Server) purgeCredentials(ctx context.Context, tenant string) {
	if s.cfg.CredentialStore == nil {
		return
	}
	rows, err := s.store.ListCredentials(ctx, tenant)
	if err == nil {
		for _, row := range rows {
			if err = s.deleteCredential(ctx, row.ID); err != nil {
				break
			}
		}
	}
	if err != nil {
		s.log.Warn("delete the credentials of a deleted tenant", "tenant", tenant, "err", err)
	}
}

func (s *Server) handleCredentialAudit(w http.ResponseWriter, r *http.Request) {
	if s.cfg.CredentialAudit == nil {
		s.writeError(w, r, errNoCredentials)
		return
	}
	tenant, err := s.credentialTenant(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	qv := r.URL.Query()
	q := credentials.AuditQuery{Tenant: tenant, Sandbox: qv.Get("sandbox"), CredentialID: qv.Get("credential"), Limit: credentials.DefaultAuditLimit}
	if l := qv.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > credentials.MaxAuditLimit {
			s.writeError(w, r, fmt.Errorf("%w: limit %q: want 1 to %d", errdefs.ErrInvalidArgument, clip(l), credentials.MaxAuditLimit))
			return
		}
		q.Limit = n
	}
	entries, err := s.cfg.CredentialAudit.Query(r.Context(), q)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := sandboxv1.CredentialAuditList{Entries: make([]sandboxv1.CredentialAuditEntry, 0, len(entries))}
	for _, e := range entries {
		out.Entries = append(out.Entries, sandboxv1.CredentialAuditEntry{
			Time: e.Time.UTC(), Tenant: e.Tenant, Project: e.Project, Sandbox: e.Sandbox, ExecutionID: e.ExecutionID,
			Host: e.Host, CredentialID: e.CredentialID, Allowed: e.Allowed, Reason: e.Reason,
			Kind: e.Kind, Where: e.Where, Count: e.Count,
		})
	}
	writeJSON(w, http.StatusOK, out)
}
