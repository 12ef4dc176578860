package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

const snapshotNameColumns = `tenant_id, name, snapshot_id, created_at`

func scanSnapshotName(sc Row) (store.SnapshotName, error) {
	var n store.SnapshotName
	var created int64
	if err := sc.Scan(&n.Tenant, &n.Name, &n.SnapshotID, &created); err != nil {
		return store.SnapshotName{}, err
	}
	n.CreatedAt = fromTS(created)
	return n, nil
}

// SetSnapshotName implements store.SnapshotNames. A zero CreatedAt is now.
func (s *Store) SetSnapshotName(ctx context.Context, n store.SnapshotName) error {
	if n.Tenant == "" || n.Name == "" || n.SnapshotID == "" {
		return fmt.Errorf("name snapshot: empty tenant, name or snapshot: %w", errdefs.ErrInvalidArgument)
	}
	if n.CreatedAt.IsZero() {
		n.CreatedAt = now()
	}
	return s.db.Write(ctx, func(tx Tx) error {
		ok, err := exists(ctx, tx, `SELECT 1 FROM snapshots WHERE id = ? AND tenant_id = ?`, n.SnapshotID, n.Tenant)
		if err != nil {
			return fmt.Errorf("snapshot %s: name %q: %w", n.SnapshotID, n.Name, err)
		}
		if !ok {
			return fmt.Errorf("snapshot %s: %w", n.SnapshotID, errdefs.ErrNotFound)
		}
		_, err = tx.Exec(ctx, `INSERT INTO snapshot_names (`+snapshotNameColumns+`) VALUES (?, ?, ?, ?)
			ON CONFLICT (tenant_id, name) DO UPDATE SET snapshot_id = excluded.snapshot_id, created_at = excluded.created_at`,
			n.Tenant, n.Name, n.SnapshotID, ts(n.CreatedAt))
		if s.d.IsForeignKey(err) { // the snapshot went in the meantime
			return fmt.Errorf("snapshot %s: %w", n.SnapshotID, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("snapshot %s: name %q: %w", n.SnapshotID, n.Name, err)
		}
		return nil
	})
}

// GetSnapshotName implements store.SnapshotNames.
func (s *Store) GetSnapshotName(ctx context.Context, tenant, name string) (store.SnapshotName, error) {
	n, err := scanSnapshotName(s.db.QueryRow(ctx, `SELECT `+snapshotNameColumns+` FROM snapshot_names
		WHERE tenant_id = ? AND name = ?`, tenant, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.SnapshotName{}, fmt.Errorf("snapshot name %q: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return store.SnapshotName{}, fmt.Errorf("snapshot name %q: get: %w", name, err)
	}
	return n, nil
}

// ListSnapshotNames implements store.SnapshotNames.
func (s *Store) ListSnapshotNames(ctx context.Context, tenant string) ([]store.SnapshotName, error) {
	out, err := queryAll(ctx, s.db, scanSnapshotName, `SELECT `+snapshotNameColumns+` FROM snapshot_names
		WHERE tenant_id = ? ORDER BY name`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list snapshot names: %w", err)
	}
	return out, nil
}
