package restapi

import (
	"context"
	"fmt"
	"net/http"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// Tenant quotas are enforced at admission: every write that makes a sandbox
// hold resources on a request's behalf (a create, a fork, a start, a
// restore, a resume from hibernation, a rollback of a sandbox that was not
// running) goes through the store's CreateSandboxWithinQuota or
// UpdateSandboxWithinQuota, which count the tenant's usage and write in one
// transaction, so that creates racing for the last slot on several replicas
// cannot all pass. The reconciler's own writes (crash and node-loss
// recovery) are not admitted: they keep what was already admitted running.
// A refusal is a *store.QuotaError (errdefs.ErrQuotaExceeded), answered
// 429 resource_exhausted with the reason quota_exceeded. The operations that
// admit are internal/service's.

// handleSetQuota is PUT /v1/tenants/{id}/quota (admin only): it replaces the
// tenant's quota and answers the tenant with its quota and usage.
func (a *API) handleSetQuota(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !sandbox.ValidTenantID(id) {
		a.writeError(w, r, fmt.Errorf("%w: tenant %q", errdefs.ErrNotFound, clip(id)))
		return
	}
	var req sandboxv1.Quota
	if err := decodeJSON(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	q := store.Quota{MaxSandboxes: req.MaxSandboxes, MaxMemoryMiB: req.MaxMemoryMiB, MaxCPUs: req.MaxCPUs}
	if err := a.store.SetTenantQuota(r.Context(), id, q); err != nil {
		a.writeError(w, r, err)
		return
	}
	t, err := a.tenantWithUsage(r.Context(), id)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	a.log.Info("tenant quota set", "tenant", id, "quota", q.String())
	writeJSON(w, http.StatusOK, t)
}

// tenantWithUsage is tenant id as the API reports it, with its usage.
func (a *API) tenantWithUsage(ctx context.Context, id string) (sandboxv1.Tenant, error) {
	t, err := a.store.GetTenant(ctx, id)
	if err != nil {
		return sandboxv1.Tenant{}, err
	}
	u, err := a.store.TenantUsage(ctx, id)
	if err != nil {
		return sandboxv1.Tenant{}, err
	}
	return tenantAPI(t, u), nil
}
