package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

const templateColumns = `name, source, state, reason, size_bytes, created_at, updated_at, egress, progress, node`

func scanTemplate(sc Row) (store.Template, error) {
	var t store.Template
	var created, updated int64
	if err := sc.Scan(&t.Name, &t.Source, &t.State, &t.Reason, &t.SizeBytes, &created, &updated, &t.Egress, &t.Progress, &t.Node); err != nil {
		return store.Template{}, err
	}
	t.CreatedAt, t.UpdatedAt = fromTS(created), fromTS(updated)
	return t, nil
}

// CreateTemplate implements store.Templates.
func (s *Store) CreateTemplate(ctx context.Context, t store.Template) error {
	if t.Name == "" {
		return fmt.Errorf("create template: empty name: %w", errdefs.ErrInvalidArgument)
	}
	at := now()
	if t.CreatedAt.IsZero() {
		t.CreatedAt = at
	}
	err := s.db.Write(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO templates (`+templateColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			t.Name, t.Source, string(t.State), t.Reason, t.SizeBytes, ts(t.CreatedAt), ts(at), t.Egress, t.Progress, t.Node)
		return err
	})
	if s.d.IsUnique(err) {
		return fmt.Errorf("template %s: already exists: %w", t.Name, errdefs.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("template %s: create: %w", t.Name, err)
	}
	return nil
}

// GetTemplate implements store.Templates.
func (s *Store) GetTemplate(ctx context.Context, name string) (store.Template, error) {
	t, err := scanTemplate(s.db.QueryRow(ctx, `SELECT `+templateColumns+` FROM templates WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Template{}, fmt.Errorf("template %s: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return store.Template{}, fmt.Errorf("template %s: get: %w", name, err)
	}
	return t, nil
}

// ListTemplates implements store.Templates.
func (s *Store) ListTemplates(ctx context.Context) ([]store.Template, error) {
	out, err := queryAll(ctx, s.db, scanTemplate, `SELECT `+templateColumns+` FROM templates ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return out, nil
}

// UpdateTemplate implements store.Templates.
func (s *Store) UpdateTemplate(ctx context.Context, t store.Template) error {
	return s.writeOne(ctx, "template "+t.Name, "update", `UPDATE templates SET source = ?, state = ?, reason = ?, size_bytes = ?,
			node = ?, updated_at = ? WHERE name = ?`, t.Source, string(t.State), t.Reason, t.SizeBytes, t.Node, ts(now()), t.Name)
}

// SetTemplateEgress implements store.Templates.
func (s *Store) SetTemplateEgress(ctx context.Context, name, egress string) error {
	return s.writeOne(ctx, "template "+name, "set egress", `UPDATE templates SET egress = ?, updated_at = ? WHERE name = ?`, egress, ts(now()), name)
}

// SetTemplateProgress implements store.Templates.
func (s *Store) SetTemplateProgress(ctx context.Context, name, progress string) error {
	return s.writeOne(ctx, "template "+name, "set progress", `UPDATE templates SET progress = ?, updated_at = ? WHERE name = ?`, progress, ts(now()), name)
}

// DeleteTemplate implements store.Templates.
func (s *Store) DeleteTemplate(ctx context.Context, name string) error {
	return s.db.Write(ctx, func(tx Tx) error {
		used, err := exists(ctx, tx, `SELECT 1 FROM sandboxes WHERE template = ? LIMIT 1`, name)
		if err != nil {
			return fmt.Errorf("template %s: delete: %w", name, err)
		}
		if used {
			return fmt.Errorf("template %s: still used by sandboxes: %w", name, errdefs.ErrConflict)
		}
		n, err := tx.Exec(ctx, `DELETE FROM templates WHERE name = ?`, name)
		if err != nil {
			return fmt.Errorf("template %s: delete: %w", name, err)
		}
		if n == 0 {
			return fmt.Errorf("template %s: %w", name, errdefs.ErrNotFound)
		}
		return nil
	})
}
