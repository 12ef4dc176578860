package restapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/apikey"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

func tenantAPI(t store.Tenant, u store.Usage) sandboxv1.Tenant {
	return sandboxv1.Tenant{
		ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt,
		Quota: sandboxv1.Quota{MaxSandboxes: t.Quota.MaxSandboxes, MaxMemoryMiB: t.Quota.MaxMemoryMiB, MaxCPUs: t.Quota.MaxCPUs},
		Usage: sandboxv1.Usage{Sandboxes: u.Sandboxes, MemoryMiB: u.MemoryMiB, CPUs: u.CPUs},
	}
}

func keyAPI(k store.APIKey) sandboxv1.APIKey {
	out := sandboxv1.APIKey{ID: k.ID, Tenant: k.Tenant, Prefix: apikey.Display(k.ID), Admin: k.Admin, CreatedAt: k.CreatedAt}
	if k.Revoked() {
		t := k.RevokedAt
		out.RevokedAt = &t
	}
	return out
}

func (s *API) handleListTenants(w http.ResponseWriter, r *http.Request) {
	ts, err := s.store.ListTenants(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := sandboxv1.TenantList{Tenants: []sandboxv1.Tenant{}}
	for _, t := range ts {
		u, err := s.store.TenantUsage(r.Context(), t.ID)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) { // deleted meanwhile: zero
			s.writeError(w, r, err)
			return
		}
		out.Tenants = append(out.Tenants, tenantAPI(t, u))
	}
	writeJSON(w, http.StatusOK, out)
}

func validTenantName(name string) error {
	if name == "" || len(name) > 64 || strings.TrimSpace(name) != name {
		return fmt.Errorf("%w: tenant name: want 1-64 characters without surrounding spaces", errdefs.ErrInvalidArgument)
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: tenant name must not contain control characters", errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

func (s *API) handleCreateTenant(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.CreateTenantRequest
	if err := decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := validTenantName(req.Name); err != nil {
		s.writeError(w, r, err)
		return
	}
	t := store.Tenant{ID: sandbox.NewTenantID(), Name: req.Name, CreatedAt: time.Now().UTC()}
	if err := s.store.CreateTenant(r.Context(), t); err != nil {
		s.writeError(w, r, err)
		return
	}
	_, secret, err := service.MintKey(r.Context(), s.store, t.ID, false)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, sandboxv1.CreateTenantResponse{Tenant: tenantAPI(t, store.Usage{}), Key: secret})
}

func (s *API) handleDeleteTenant(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == s.caller(r).Tenant {
		s.writeError(w, r, fmt.Errorf("%w: the admin key's own tenant cannot be deleted", errdefs.ErrConflict))
		return
	}
	if !sandbox.ValidTenantID(id) {
		s.writeError(w, r, fmt.Errorf("%w: tenant %q", errdefs.ErrNotFound, clip(id)))
		return
	}
	if err := s.store.DeleteTenant(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.purgeCredentials(context.WithoutCancel(r.Context()), id)
	w.WriteHeader(http.StatusNoContent)
}

// keyTenant resolves the tenant a key request is about: the caller's own, or
// any tenant for the admin key.
func (s *API) keyTenant(r *http.Request, asked string) (string, error) {
	return service.TenantFor(r.Context(), s.store, s.caller(r), asked)
}

func (s *API) handleListKeys(w http.ResponseWriter, r *http.Request) {
	tenant, err := s.keyTenant(r, r.URL.Query().Get("tenant"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	keys, err := s.store.ListAPIKeys(r.Context(), tenant)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := sandboxv1.APIKeyList{Keys: []sandboxv1.APIKey{}}
	for _, k := range keys {
		out.Keys = append(out.Keys, keyAPI(k))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *API) handleCreateKey(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.CreateKeyRequest
	if err := decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	tenant, err := s.keyTenant(r, req.Tenant)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	row, secret, err := service.MintKey(r.Context(), s.store, tenant, false)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, sandboxv1.CreateKeyResponse{Key: keyAPI(row), Secret: secret})
}

func (s *API) handleRevokeKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	id = strings.TrimPrefix(id, apikey.Prefix)
	notFound := fmt.Errorf("%w: key %q", errdefs.ErrNotFound, clip(id))
	k, err := s.store.GetAPIKey(r.Context(), id)
	if errors.Is(err, errdefs.ErrNotFound) {
		s.writeError(w, r, notFound)
		return
	} else if err != nil {
		s.writeError(w, r, err)
		return
	}
	c := s.caller(r)
	if k.Tenant != c.Tenant && !c.Admin {
		s.writeError(w, r, notFound)
		return
	}
	if err := s.store.RevokeAPIKey(r.Context(), id, time.Now().UTC()); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
