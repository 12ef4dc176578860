package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

const templateBuildColumns = `id, tenant_id, alias, template, state, reason, sandbox_id, cpus, memory_mib, created_at, updated_at`

func scanTemplateBuild(sc Row) (store.TemplateBuild, error) {
	var b store.TemplateBuild
	var created, updated int64
	if err := sc.Scan(&b.ID, &b.TenantID, &b.Alias, &b.Template, &b.State, &b.Reason, &b.SandboxID,
		&b.CPUs, &b.MemoryMiB, &created, &updated); err != nil {
		return store.TemplateBuild{}, err
	}
	b.CreatedAt, b.UpdatedAt = fromTS(created), fromTS(updated)
	return b, nil
}

// CreateTemplateBuild implements store.TemplateBuilds.
func (s *Store) CreateTemplateBuild(ctx context.Context, b store.TemplateBuild) error {
	if b.ID == "" || b.TenantID == "" || b.Alias == "" || b.Template == "" {
		return fmt.Errorf("create template build: id, tenant, alias and template are required: %w", errdefs.ErrInvalidArgument)
	}
	at := now()
	if b.CreatedAt.IsZero() {
		b.CreatedAt = at
	}
	err := s.db.Write(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO template_builds (`+templateBuildColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			b.ID, b.TenantID, b.Alias, b.Template, string(b.State), b.Reason, b.SandboxID, b.CPUs, b.MemoryMiB, ts(b.CreatedAt), ts(at))
		return err
	})
	if s.d.IsUnique(err) {
		return fmt.Errorf("template build %s: already exists: %w", b.ID, errdefs.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("template build %s: create: %w", b.ID, err)
	}
	return nil
}

// GetTemplateBuild implements store.TemplateBuilds.
func (s *Store) GetTemplateBuild(ctx context.Context, id string) (store.TemplateBuild, error) {
	b, err := scanTemplateBuild(s.db.QueryRow(ctx, `SELECT `+templateBuildColumns+` FROM template_builds WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.TemplateBuild{}, fmt.Errorf("template build %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return store.TemplateBuild{}, fmt.Errorf("template build %s: get: %w", id, err)
	}
	return b, nil
}

// ListTemplateBuilds implements store.TemplateBuilds.
func (s *Store) ListTemplateBuilds(ctx context.Context, alias string) ([]store.TemplateBuild, error) {
	out, err := queryAll(ctx, s.db, scanTemplateBuild,
		`SELECT `+templateBuildColumns+` FROM template_builds WHERE alias = ? ORDER BY created_at DESC, id DESC`, alias)
	if err != nil {
		return nil, fmt.Errorf("list template builds of %s: %w", alias, err)
	}
	return out, nil
}

// ListRunningTemplateBuilds implements store.TemplateBuilds.
func (s *Store) ListRunningTemplateBuilds(ctx context.Context) ([]store.TemplateBuild, error) {
	out, err := queryAll(ctx, s.db, scanTemplateBuild,
		`SELECT `+templateBuildColumns+` FROM template_builds WHERE state <> ? AND state <> ? ORDER BY created_at, id`,
		string(store.BuildReady), string(store.BuildError))
	if err != nil {
		return nil, fmt.Errorf("list running template builds: %w", err)
	}
	return out, nil
}

// UpdateTemplateBuild implements store.TemplateBuilds: the statement
// itself skips a final row, so a build marked lost by one replica is never
// overwritten by another's late write.
func (s *Store) UpdateTemplateBuild(ctx context.Context, b store.TemplateBuild) error {
	return s.db.Write(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `UPDATE template_builds SET state = ?, reason = ?, sandbox_id = ?, template = ?, updated_at = ?
			WHERE id = ? AND state <> ? AND state <> ?`,
			string(b.State), b.Reason, b.SandboxID, b.Template, ts(now()), b.ID, string(store.BuildReady), string(store.BuildError))
		if err != nil {
			return fmt.Errorf("template build %s: update: %w", b.ID, err)
		}
		if n > 0 {
			return nil
		}
		found, err := exists(ctx, tx, `SELECT 1 FROM template_builds WHERE id = ?`, b.ID)
		if err != nil {
			return fmt.Errorf("template build %s: update: %w", b.ID, err)
		}
		if found {
			return fmt.Errorf("template build %s: finished already: %w", b.ID, errdefs.ErrConflict)
		}
		return fmt.Errorf("template build %s: %w", b.ID, errdefs.ErrNotFound)
	})
}

// DeleteTemplateBuild implements store.TemplateBuilds.
func (s *Store) DeleteTemplateBuild(ctx context.Context, id string) error {
	return s.writeOne(ctx, "template build "+id, "delete", `DELETE FROM template_builds WHERE id = ?`, id)
}
