package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// Admission under a quota is a read (the tenant's quota and usage) followed
// by a write (the sandbox) in one write transaction, whose outcome DB.Write
// makes that of some serial order of all writes: SQLite runs one writer at a
// time; PostgreSQL, at SERIALIZABLE, aborts one of two replicas admitting
// sandboxes of a tenant at once (each read the usage the other is about to
// change) and the retry counts the other's sandbox. So a tenant never passes
// its quota however many replicas admit at once. The count reads through
// sandboxes_by_tenant_state, so admissions of different tenants rarely
// conflict. With no quota the usage is not read at all.

// usageQuery sums the tenant's sandboxes that hold resources, but one (?).
var usageQuery = `SELECT COUNT(*), COALESCE(SUM(memory_mib), 0), COALESCE(SUM(cpus), 0) FROM sandboxes
	WHERE tenant_id = ? AND id <> ? AND state NOT IN (` + releasedList() + `)`

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
	return s.writeOne(ctx, "tenant "+id, "set quota", `UPDATE tenants SET max_sandboxes = ?, max_memory_mib = ?, max_cpus = ? WHERE id = ?`,
		q.MaxSandboxes, q.MaxMemoryMiB, q.MaxCPUs, id)
}

// TenantUsage implements store.Tenants.
func (s *Store) TenantUsage(ctx context.Context, id string) (store.Usage, error) {
	var u store.Usage
	err := s.db.QueryRow(ctx, `SELECT 1 FROM tenants WHERE id = ?`, id).Scan(new(int))
	if errors.Is(err, sql.ErrNoRows) {
		return u, fmt.Errorf("tenant %s: %w", id, errdefs.ErrNotFound)
	}
	if err == nil {
		err = s.db.QueryRow(ctx, usageQuery, id, "").Scan(&u.Sandboxes, &u.MemoryMiB, &u.CPUs)
	}
	if err != nil {
		return u, fmt.Errorf("tenant %s: usage: %w", id, err)
	}
	return u, nil
}

// admit checks, inside tx, that sb's tenant may add sb to what its other
// sandboxes hold.
func admit(ctx context.Context, tx Tx, sb *sandbox.Sandbox) error {
	var q store.Quota
	err := tx.QueryRow(ctx, `SELECT max_sandboxes, max_memory_mib, max_cpus FROM tenants WHERE id = ?`, sb.Tenant).
		Scan(&q.MaxSandboxes, &q.MaxMemoryMiB, &q.MaxCPUs)
	if errors.Is(err, sql.ErrNoRows) {
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
func admitUpdate(ctx context.Context, tx Tx, sb *sandbox.Sandbox) error {
	if !store.HoldsResources(sb.State) {
		return nil
	}
	var state string
	var version int64
	err := tx.QueryRow(ctx, `SELECT state, version FROM sandboxes WHERE id = ?`, sb.ID).Scan(&state, &version)
	if err != nil {
		return sandboxErr(sb.ID, "update", err)
	}
	if version != int64(sb.Version) || store.HoldsResources(sandbox.State(state)) {
		return nil
	}
	return admit(ctx, tx, sb)
}
