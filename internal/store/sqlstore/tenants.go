package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// tenantColumns are the columns a Tenant is scanned from, in order.
const tenantColumns = `id, name, created_at, max_sandboxes, max_memory_mib, max_cpus`

// CreateTenant implements store.Tenants.
func (s *Store) CreateTenant(ctx context.Context, t store.Tenant) error {
	if t.ID == "" {
		return fmt.Errorf("create tenant: empty id: %w", errdefs.ErrInvalidArgument)
	}
	if err := t.Quota.Validate(); err != nil {
		return fmt.Errorf("tenant %s: %w", t.ID, err)
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = now()
	}
	err := s.db.Write(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO tenants (id, name, created_at, max_sandboxes, max_memory_mib, max_cpus)
			VALUES (?, ?, ?, ?, ?, ?)`,
			t.ID, t.Name, ts(t.CreatedAt), t.Quota.MaxSandboxes, t.Quota.MaxMemoryMiB, t.Quota.MaxCPUs)
		return err
	})
	if s.d.IsUnique(err) {
		return fmt.Errorf("tenant %s: already exists: %w", t.ID, errdefs.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("tenant %s: create: %w", t.ID, err)
	}
	return nil
}

func scanTenant(sc Row) (store.Tenant, error) {
	var t store.Tenant
	var created int64
	err := sc.Scan(&t.ID, &t.Name, &created, &t.Quota.MaxSandboxes, &t.Quota.MaxMemoryMiB, &t.Quota.MaxCPUs)
	t.CreatedAt = fromTS(created)
	return t, err
}

// GetTenant implements store.Tenants.
func (s *Store) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	t, err := scanTenant(s.db.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Tenant{}, fmt.Errorf("tenant %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return store.Tenant{}, fmt.Errorf("tenant %s: get: %w", id, err)
	}
	return t, nil
}

// ListTenants implements store.Tenants.
func (s *Store) ListTenants(ctx context.Context) ([]store.Tenant, error) {
	out, err := queryAll(ctx, s.db, scanTenant, `SELECT `+tenantColumns+` FROM tenants ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return out, nil
}

// DeleteTenant implements store.Tenants. Keys and idempotency records go with
// the tenant (ON DELETE CASCADE); sandboxes and snapshots must be deleted
// first (ErrConflict).
func (s *Store) DeleteTenant(ctx context.Context, id string) error {
	return s.db.Write(ctx, func(tx Tx) error {
		busy, err := exists(ctx, tx, `SELECT 1 FROM sandboxes WHERE tenant_id = ? LIMIT 1`, id)
		if err != nil {
			return fmt.Errorf("tenant %s: delete: %w", id, err)
		}
		if busy {
			return fmt.Errorf("tenant %s: still has sandboxes; delete them first: %w", id, errdefs.ErrConflict)
		}
		// Snapshot rows outlive their sandbox, and their files must be removed
		// before the row goes; a tenant with rows left would orphan them.
		busy, err = exists(ctx, tx, `SELECT 1 FROM snapshots WHERE tenant_id = ? LIMIT 1`, id)
		if err != nil {
			return fmt.Errorf("tenant %s: delete: %w", id, err)
		}
		if busy {
			return fmt.Errorf("tenant %s: still has snapshots; delete them first: %w", id, errdefs.ErrConflict)
		}
		n, err := tx.Exec(ctx, `DELETE FROM tenants WHERE id = ?`, id)
		if err != nil {
			return fmt.Errorf("tenant %s: delete: %w", id, err)
		}
		if n == 0 {
			return fmt.Errorf("tenant %s: %w", id, errdefs.ErrNotFound)
		}
		return nil
	})
}

// CreateAPIKey implements store.APIKeys.
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	if k.ID == "" || k.Hash == "" {
		return fmt.Errorf("create api key: empty id or hash: %w", errdefs.ErrInvalidArgument)
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = now()
	}
	return s.db.Write(ctx, func(tx Tx) error {
		ok, err := exists(ctx, tx, `SELECT 1 FROM tenants WHERE id = ?`, k.Tenant)
		if err != nil {
			return fmt.Errorf("api key %s: create: %w", k.ID, err)
		}
		if !ok {
			return fmt.Errorf("api key %s: tenant %s: %w", k.ID, k.Tenant, errdefs.ErrNotFound)
		}
		_, err = tx.Exec(ctx, `INSERT INTO api_keys (id, tenant_id, hash, admin, created_at, revoked_at)
			VALUES (?, ?, ?, ?, ?, ?)`, k.ID, k.Tenant, k.Hash, k.Admin, ts(k.CreatedAt), nullTS(k.RevokedAt))
		if s.d.IsUnique(err) {
			return fmt.Errorf("api key %s: already exists: %w", k.ID, errdefs.ErrConflict)
		}
		if s.d.IsForeignKey(err) { // the tenant went in the meantime
			return fmt.Errorf("api key %s: tenant %s: %w", k.ID, k.Tenant, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("api key %s: create: %w", k.ID, err)
		}
		return nil
	})
}

const apiKeyColumns = `id, tenant_id, hash, admin, created_at, revoked_at`

func scanAPIKey(sc Row) (store.APIKey, error) {
	var k store.APIKey
	var created int64
	var revoked *int64
	if err := sc.Scan(&k.ID, &k.Tenant, &k.Hash, &k.Admin, &created, &revoked); err != nil {
		return store.APIKey{}, err
	}
	k.CreatedAt, k.RevokedAt = fromTS(created), fromNullTS(revoked)
	return k, nil
}

// GetAPIKey implements store.APIKeys. Every read runs outside a transaction,
// so a revocation committed by any replica is seen by the next lookup.
func (s *Store) GetAPIKey(ctx context.Context, id string) (store.APIKey, error) {
	k, err := scanAPIKey(s.db.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.APIKey{}, fmt.Errorf("api key %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return store.APIKey{}, fmt.Errorf("api key %s: get: %w", id, err)
	}
	return k, nil
}

// ListAPIKeys implements store.APIKeys.
func (s *Store) ListAPIKeys(ctx context.Context, tenant string) ([]store.APIKey, error) {
	out, err := queryAll(ctx, s.db, scanAPIKey, `SELECT `+apiKeyColumns+` FROM api_keys WHERE tenant_id = ? ORDER BY created_at, id`, tenant)
	if err != nil {
		return nil, fmt.Errorf("tenant %s: list api keys: %w", tenant, err)
	}
	return out, nil
}

// RevokeAPIKey implements store.APIKeys.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		at = now()
	}
	return s.db.Write(ctx, func(tx Tx) error {
		ok, err := exists(ctx, tx, `SELECT 1 FROM api_keys WHERE id = ?`, id)
		if err != nil {
			return fmt.Errorf("api key %s: revoke: %w", id, err)
		}
		if !ok {
			return fmt.Errorf("api key %s: %w", id, errdefs.ErrNotFound)
		}
		if _, err := tx.Exec(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, ts(at), id); err != nil {
			return fmt.Errorf("api key %s: revoke: %w", id, err)
		}
		return nil
	})
}
