package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// Admission under a quota is a read (the tenant's quota and usage) followed
// by a write (the sandbox) in one SERIALIZABLE transaction. Two replicas
// admitting sandboxes of one tenant at once each read the usage the other is
// about to change: PostgreSQL sees the read/write dependency cycle and aborts
// one with a serialization failure, which write retries from the start, when
// it counts the other's sandbox. So the outcome is that of some serial order,
// and a tenant never passes its quota however many replicas admit at once.
// The count reads through sandboxes_by_tenant_state, so admissions of
// different tenants rarely conflict; when PostgreSQL scans the whole table
// instead (a small one) they may, and the loser is retried like any other.
// With no quota the usage is not read at all.

// usageQuery sums the tenant's sandboxes that hold resources, but one ($2).
var usageQuery = `SELECT COUNT(*), COALESCE(SUM(memory_mib), 0), COALESCE(SUM(cpus), 0) FROM sandboxes
	WHERE tenant_id = $1 AND id <> $2 AND state NOT IN (` + releasedList() + `)`

// releasedList is store.ReleasedStates as an SQL list of literals.
func releasedList() string {
	var q []string
	for _, s := range store.ReleasedStates {
		q = append(q, "'"+string(s)+"'")
	}
	return strings.Join(q, ", ")
}

// SetTenantQuota implements store.Tenants.
func (s *Store) SetTenantQuota(ctx context.Context, id string, q store.Quota) error {
	if err := q.Validate(); err != nil {
		return fmt.Errorf("tenant %s: %w", id, err)
	}
	return s.write(ctx, func(tx pgx.Tx) error {
		res, err := tx.Exec(ctx, `UPDATE tenants SET max_sandboxes = $1, max_memory_mib = $2, max_cpus = $3 WHERE id = $4`,
			q.MaxSandboxes, q.MaxMemoryMiB, q.MaxCPUs, id)
		if err != nil {
			return fmt.Errorf("tenant %s: set quota: %w", id, err)
		}
		if res.RowsAffected() == 0 {
			return fmt.Errorf("tenant %s: %w", id, errdefs.ErrNotFound)
		}
		return nil
	})
}

// TenantUsage implements store.Tenants.
func (s *Store) TenantUsage(ctx context.Context, id string) (store.Usage, error) {
	var u store.Usage
	err := s.queryRow(ctx, `SELECT 1 FROM tenants WHERE id = $1`, id).Scan(new(int))
	if errors.Is(err, pgx.ErrNoRows) {
		return u, fmt.Errorf("tenant %s: %w", id, errdefs.ErrNotFound)
	}
	if err == nil {
		err = s.queryRow(ctx, usageQuery, id, "").Scan(&u.Sandboxes, &u.MemoryMiB, &u.CPUs)
	}
	if err != nil {
		return u, fmt.Errorf("tenant %s: usage: %w", id, err)
	}
	return u, nil
}

// admit checks, inside tx, that sb's tenant may add sb to what its other
// sandboxes hold.
func admit(ctx context.Context, tx pgx.Tx, sb *sandbox.Sandbox) error {
	var q store.Quota
	err := tx.QueryRow(ctx, `SELECT max_sandboxes, max_memory_mib, max_cpus FROM tenants WHERE id = $1`, sb.Tenant).
		Scan(&q.MaxSandboxes, &q.MaxMemoryMiB, &q.MaxCPUs)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("sandbox %s: tenant %s: %w", sb.ID, sb.Tenant, errdefs.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("sandbox %s: admit: %w", sb.ID, err)
	}
	if q.Unlimited() {
		return nil
	}
	var u store.Usage
	if err := tx.QueryRow(ctx, usageQuery, sb.Tenant, sb.ID).Scan(&u.Sandboxes, &u.MemoryMiB, &u.CPUs); err != nil {
		return fmt.Errorf("sandbox %s: admit: %w", sb.ID, err)
	}
	return q.Admit(sb.Tenant, u, store.UsageOf(sb))
}

// admitUpdate admits sb inside tx when the update moves it from a stored
// state that holds no resources into one that does. A stale sb is left for
// the update's version check to refuse.
func admitUpdate(ctx context.Context, tx pgx.Tx, sb *sandbox.Sandbox) error {
	if !store.HoldsResources(sb.State) {
		return nil
	}
	var state string
	var version int64
	err := tx.QueryRow(ctx, `SELECT state, version FROM sandboxes WHERE id = $1`, sb.ID).Scan(&state, &version)
	if err != nil {
		return sandboxErr(sb.ID, "update", err)
	}
	if version != int64(sb.Version) || store.HoldsResources(sandbox.State(state)) {
		return nil
	}
	return admit(ctx, tx, sb)
}
