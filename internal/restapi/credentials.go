package restapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// The credential routes: the operations, the index and the rules of what a
// response may show (never a secret) are internal/service's
// (service.Credentials); these handlers decode and encode.

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

func (a *API) handleCreateCredential(w http.ResponseWriter, r *http.Request) {
	if err := a.creds.Available(); err != nil {
		a.writeError(w, r, err)
		return
	}
	var req sandboxv1.CreateCredentialRequest
	if err := decodeJSON(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	c, created, err := a.creds.Create(r.Context(), a.caller(r), req)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, credentialAPI(c, created))
}

func (a *API) handleListCredentials(w http.ResponseWriter, r *http.Request) {
	rows, err := a.creds.List(r.Context(), a.caller(r), r.URL.Query().Get("tenant"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := sandboxv1.CredentialList{Credentials: []sandboxv1.Credential{}}
	for _, row := range rows {
		c, err := indexAPI(row)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		out.Credentials = append(out.Credentials, c)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) handleGetCredential(w http.ResponseWriter, r *http.Request) {
	row, err := a.creds.Get(r.Context(), a.caller(r), r.URL.Query().Get("tenant"), r.PathValue("id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	c, err := indexAPI(row)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (a *API) handleDeleteCredential(w http.ResponseWriter, r *http.Request) {
	if err := a.creds.Delete(r.Context(), a.caller(r), r.URL.Query().Get("tenant"), r.PathValue("id")); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// purgeCredentials deletes every credential of a deleted tenant.
func (a *API) purgeCredentials(ctx context.Context, tenant string) {
	a.creds.PurgeTenant(ctx, tenant)
}

func (a *API) handleCredentialAudit(w http.ResponseWriter, r *http.Request) {
	tenant, err := a.creds.AuditTenant(r.Context(), a.caller(r), r.URL.Query().Get("tenant"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	qv := r.URL.Query()
	q := credentials.AuditQuery{Tenant: tenant, Sandbox: qv.Get("sandbox"), CredentialID: qv.Get("credential"), Limit: credentials.DefaultAuditLimit}
	if l := qv.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > credentials.MaxAuditLimit {
			a.writeError(w, r, fmt.Errorf("%w: limit %q: want 1 to %d", errdefs.ErrInvalidArgument, clip(l), credentials.MaxAuditLimit))
			return
		}
		q.Limit = n
	}
	entries, err := a.creds.Audit(r.Context(), q)
	if err != nil {
		a.writeError(w, r, err)
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
