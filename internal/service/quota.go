package service

import (
	"context"

	"github.com/spacesandbox/space/internal/scheduler"
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
// A refusal is a *store.QuotaError.

// quotaCheck refuses early, before costly work (a fork's snapshot), what
// the tenant's quota would refuse at admission anyway. It is advisory: the
// admission decides.
func (s *Sandboxes) quotaCheck(ctx context.Context, tenant string, more store.Usage) error {
	tq, err := s.tenantQuota(ctx, tenant)
	if err != nil || tq == nil {
		return err
	}
	return tq.Quota.Admit(tenant, tq.Usage, more)
}

// tenantQuota returns the tenant's quota and usage for the scheduler's
// explanation, or nil when the tenant has no quota.
func (s *Sandboxes) tenantQuota(ctx context.Context, tenant string) (*scheduler.TenantQuota, error) {
	t, err := s.store.GetTenant(ctx, tenant)
	if err != nil || t.Quota.Unlimited() {
		return nil, err
	}
	u, err := s.store.TenantUsage(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return &scheduler.TenantQuota{ID: tenant, Quota: t.Quota, Usage: u}, nil
}
