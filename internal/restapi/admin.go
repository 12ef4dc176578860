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

func (a *API) handleListTenants(w http.ResponseWriter, r *http.Request) {
	ts, err := a.store.ListTenants(r.Context())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := sandboxv1.TenantList{Tenants: []sandboxv1.Tenant{}}
	for _, t := range ts {
		u, err := a.store.TenantUsage(r.Context(), t.ID)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) { // deleted meanwhile: zero
			a.writeError(w, r, err)
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

func (a *API) handleCreateTenant(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.CreateTenantRequest
	if err := decodeJSON(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	if err := validTenantName(req.Name); err != nil {
		a.writeError(w, r, err)
		return
	}
	t := store.Tenant{ID: sandbox.NewTenantID(), Name: req.Name, CreatedAt: time.Now().UTC()}
	if err := a.store.CreateTenant(r.Context(), t); err != nil {
		a.writeError(w, r, err)
		return
	}
	_, secret, err := service.MintKey(r.Context(), a.store, t.ID, false)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, sandboxv1.CreateTenantResponse{Tenant: tenantAPI(t, store.Usage{}), Key: secret})
}

func (a *API) handleDeleteTenant(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == a.caller(r).Tenant {
		a.writeError(w, r, fmt.Errorf("%w: the admin key's own tenant cannot be deleted", errdefs.ErrConflict))
		return
	}
	if !sandbox.ValidTenantID(id) {
		a.writeError(w, r, fmt.Errorf("%w: tenant %q", errdefs.ErrNotFound, clip(id)))
		return
	}
	if err := a.store.DeleteTenant(r.Context(), id); err != nil {
		a.writeError(w, r, err)
		return
	}
	a.purgeCredentials(context.WithoutCancel(r.Context()), id)
	w.WriteHeader(http.StatusNoContent)
}

// keyTenant resolves the tenant a key request is about: the caller's own, or
// any tenant for the admin key.
func (a *API) keyTenant(r *http.Request, asked string) (string, error) {
	return service.TenantFor(r.Context(), a.store, a.caller(r), asked)
}

func (a *API) handleListKeys(w http.ResponseWriter, r *http.Request) {
	tenant, err := a.keyTenant(r, r.URL.Query().Get("tenant"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	keys, err := a.store.ListAPIKeys(r.Context(), tenant)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := sandboxv1.APIKeyList{Keys: []sandboxv1.APIKey{}}
	for _, k := range keys {
		out.Keys = append(out.Keys, keyAPI(k))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) handleCreateKey(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.CreateKeyRequest
	if err := decodeJSON(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	tenant, err := a.keyTenant(r, req.Tenant)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	mint := func() (store.APIKey, string, error) { return service.MintKey(r.Context(), a.store, tenant, false) }
	if req.E2B {
		mint = func() (store.APIKey, string, error) { return service.MintE2BKey(r.Context(), a.store, tenant) }
	}
	row, secret, err := mint()
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, sandboxv1.CreateKeyResponse{Key: keyAPI(row), Secret: secret})
}

func (a *API) handleRevokeKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	id = apikey.IDOf(id)
	notFound := fmt.Errorf("%w: key %q", errdefs.ErrNotFound, clip(id))
	k, err := a.store.GetAPIKey(r.Context(), id)
	if errors.Is(err, errdefs.ErrNotFound) {
		a.writeError(w, r, notFound)
		return
	} else if err != nil {
		a.writeError(w, r, err)
		return
	}
	c := a.caller(r)
	if k.Tenant != c.Tenant && !c.Admin {
		a.writeError(w, r, notFound)
		return
	}
	if err := a.store.RevokeAPIKey(r.Context(), id, time.Now().UTC()); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
