package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

const snapshotColumns = `id, sandbox_id, tenant_id, kind, tier, state, reason, node_id, runtime, template,
	cpus, memory_mib, generation, size_bytes, artifacts, created_at, updated_at`

func scanSnapshot(sc Row) (store.Snapshot, error) {
	var sn store.Snapshot
	var generation, created, updated int64
	err := sc.Scan(&sn.ID, &sn.SandboxID, &sn.Tenant, &sn.Kind, &sn.Tier, &sn.State, &sn.Reason, &sn.Node,
		&sn.Runtime, &sn.Template, &sn.CPUs, &sn.MemoryMiB, &generation, &sn.SizeBytes, &sn.Artifacts,
		&created, &updated)
	if err != nil {
		return store.Snapshot{}, err
	}
	sn.Generation = uint64(generation)
	sn.CreatedAt, sn.UpdatedAt = fromTS(created), fromTS(updated)
	return sn, nil
}

// checkSnapshotKind and checkSnapshotState refuse values outside the
// contract's enumerations, so a typo never lands in a row the reconciler
// would then not know how to drive.
func checkSnapshotKind(id string, k store.SnapshotKind) error {
	switch k {
	case store.SnapshotDisk, store.SnapshotFull:
		return nil
	}
	return fmt.Errorf("snapshot %s: kind %q: want %q or %q: %w", id, k, store.SnapshotDisk, store.SnapshotFull,
		errdefs.ErrInvalidArgument)
}

func checkSnapshotState(id string, st store.SnapshotState) error {
	switch st {
	case store.SnapshotCreating, store.SnapshotReady, store.SnapshotFailed, store.SnapshotDeleting:
		return nil
	}
	return fmt.Errorf("snapshot %s: state %q: want creating, ready, failed or deleting: %w", id, st,
		errdefs.ErrInvalidArgument)
}

// CreateSnapshot implements store.Snapshots. A zero CreatedAt is now;
// UpdatedAt is always now.
func (s *Store) CreateSnapshot(ctx context.Context, sn store.Snapshot) error {
	if sn.ID == "" || sn.SandboxID == "" || sn.Tenant == "" || sn.Kind == "" {
		return fmt.Errorf("create snapshot: empty id, sandbox, tenant or kind: %w", errdefs.ErrInvalidArgument)
	}
	if err := errors.Join(checkSnapshotKind(sn.ID, sn.Kind), checkSnapshotState(sn.ID, sn.State)); err != nil {
		return err
	}
	at := now()
	if sn.CreatedAt.IsZero() {
		sn.CreatedAt = at
	}
	return s.db.Write(ctx, func(tx Tx) error {
		ok, err := exists(ctx, tx, `SELECT 1 FROM tenants WHERE id = ?`, sn.Tenant)
		if err != nil {
			return fmt.Errorf("snapshot %s: create: %w", sn.ID, err)
		}
		if !ok {
			return fmt.Errorf("snapshot %s: tenant %s: %w", sn.ID, sn.Tenant, errdefs.ErrNotFound)
		}
		_, err = tx.Exec(ctx, `INSERT INTO snapshots (`+snapshotColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			sn.ID, sn.SandboxID, sn.Tenant, string(sn.Kind), sn.Tier, string(sn.State), sn.Reason, sn.Node,
			sn.Runtime, sn.Template, sn.CPUs, sn.MemoryMiB, int64(sn.Generation), sn.SizeBytes, sn.Artifacts,
			ts(sn.CreatedAt), ts(at))
		if s.d.IsUnique(err) {
			return fmt.Errorf("snapshot %s: already exists: %w", sn.ID, errdefs.ErrConflict)
		}
		if s.d.IsForeignKey(err) { // the tenant went in the meantime
			return fmt.Errorf("snapshot %s: tenant %s: %w", sn.ID, sn.Tenant, errdefs.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("snapshot %s: create: %w", sn.ID, err)
		}
		return nil
	})
}

// GetSnapshot implements store.Snapshots.
func (s *Store) GetSnapshot(ctx context.Context, tenant, id string) (store.Snapshot, error) {
	q, args := `SELECT `+snapshotColumns+` FROM snapshots WHERE id = ?`, []any{id}
	if tenant != "" {
		q, args = q+` AND tenant_id = ?`, append(args, tenant)
	}
	sn, err := scanSnapshot(s.db.QueryRow(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Snapshot{}, fmt.Errorf("snapshot %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("snapshot %s: get: %w", id, err)
	}
	return sn, nil
}

// ListSnapshots implements store.Snapshots.
func (s *Store) ListSnapshots(ctx context.Context, f store.SnapshotFilter) ([]store.Snapshot, error) {
	var where []string
	var args []any
	if f.SandboxID != "" {
		where, args = append(where, "sandbox_id = ?"), append(args, f.SandboxID)
	}
	if f.Tenant != "" {
		where, args = append(where, "tenant_id = ?"), append(args, f.Tenant)
	}
	if f.State != "" {
		where, args = append(where, "state = ?"), append(args, string(f.State))
	}
	q := `SELECT ` + snapshotColumns + ` FROM snapshots`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	out, err := queryAll(ctx, s.db, scanSnapshot, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return out, nil
}

// ListUnsettledSnapshots implements store.Snapshots (index snapshots_by_state).
func (s *Store) ListUnsettledSnapshots(ctx context.Context) ([]store.Snapshot, error) {
	out, err := queryAll(ctx, s.db, scanSnapshot, `SELECT `+snapshotColumns+` FROM snapshots
		WHERE state IN (?, ?) ORDER BY created_at, id`, string(store.SnapshotCreating), string(store.SnapshotDeleting))
	if err != nil {
		return nil, fmt.Errorf("list unsettled snapshots: %w", err)
	}
	return out, nil
}

// UpdateSnapshot implements store.Snapshots. Only state, reason, node, size
// and artifacts are written; the other fields of sn are ignored.
func (s *Store) UpdateSnapshot(ctx context.Context, sn store.Snapshot) error {
	if sn.ID == "" {
		return fmt.Errorf("update snapshot: empty id: %w", errdefs.ErrInvalidArgument)
	}
	if err := checkSnapshotState(sn.ID, sn.State); err != nil {
		return err
	}
	return s.writeOne(ctx, "snapshot "+sn.ID, "update", `UPDATE snapshots SET state = ?, reason = ?, node_id = ?, size_bytes = ?,
			artifacts = ?, updated_at = ? WHERE id = ?`,
		string(sn.State), sn.Reason, sn.Node, sn.SizeBytes, sn.Artifacts, ts(now()), sn.ID)
}

// DeleteSnapshot implements store.Snapshots.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	return s.writeOne(ctx, "snapshot "+id, "delete", `DELETE FROM snapshots WHERE id = ?`, id)
}
