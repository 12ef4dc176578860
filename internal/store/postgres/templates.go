package postgres

import (
	"context"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

const templateColumns = `name, source, state, reason, size_bytes, created_at, updated_at, egress`

func scanTemplate(sc interface{ Scan(...any) error }) (store.Template, error) {
	var t store.Template
	var created, updated int64
	if err := sc.Scan(&t.Name, &t.Source, &t.State, &t.Reason, &t.SizeBytes, &created, &updated, &t.Egress); err != nil {
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
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO templates (`+templateColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			t.Name, t.Source, string(t.State), t.Reason, t.SizeBytes, ts(t.CreatedAt), ts(at), t.Egress)
		return err
	})
	if isUnique(err) {
		return fmt.Errorf("template %s: already exists: %w", t.Name, errdefs.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("template %s: create: %w", t.Name, err)
	}
	return nil
}

// GetTemplate implements store.Templates.
func (s *Store) GetTemplate(ctx context.Context, name string) (store.Template, error) {
	t, err := scanTemplate(s.queryRow(ctx, `SELECT `+templateColumns+` FROM templates WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Template{}, fmt.Errorf("template %s: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return store.Template{}, fmt.Errorf("template %s: get: %w", name, err)
	}
	return t, nil
}

// ListTemplates implements store.Templates.
func (s *Store) ListTemplates(ctx context.Context) ([]store.Template, error) {
	rows, err := s.query(ctx, `SELECT `+templateColumns+` FROM templates ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	defer rows.Close()
	out := []store.Template{}
	for rows.Next() {
		t, err := scanTemplate(rows)
		if err != nil {
			return nil, fmt.Errorf("list templates: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return out, nil
}

// UpdateTemplate implements store.Templates.
func (s *Store) UpdateTemplate(ctx context.Context, t store.Template) error {
	return s.write(ctx, func(tx pgx.Tx) error {
		res, err := tx.Exec(ctx, `UPDATE templates SET source = $1, state = $2, reason = $3, size_bytes = $4,
			updated_at = $5 WHERE name = $6`, t.Source, string(t.State), t.Reason, t.SizeBytes, ts(now()), t.Name)
		if err != nil {
			return fmt.Errorf("template %s: update: %w", t.Name, err)
		}
		if res.RowsAffected() == 0 {
			return fmt.Errorf("template %s: %w", t.Name, errdefs.ErrNotFound)
		}
		return nil
	})
}

// SetTemplateEgress implements store.Templates.
func (s *Store) SetTemplateEgress(ctx context.Context, name, egress string) error {
	return s.write(ctx, func(tx pgx.Tx) error {
		res, err := tx.Exec(ctx, `UPDATE templates SET egress = $1, updated_at = $2 WHERE name = $3`, egress, ts(now()), name)
		if err != nil {
			return fmt.Errorf("template %s: set egress: %w", name, err)
		}
		if res.RowsAffected() == 0 {
			return fmt.Errorf("template %s: %w", name, errdefs.ErrNotFound)
		}
		return nil
	})
}

// DeleteTemplate implements store.Templates.
func (s *Store) DeleteTemplate(ctx context.Context, name string) error {
	return s.write(ctx, func(tx pgx.Tx) error {
		used, err := exists(ctx, tx, `SELECT 1 FROM sandboxes WHERE template = $1 LIMIT 1`, name)
		if err != nil {
			return fmt.Errorf("template %s: delete: %w", name, err)
		}
		if used {
			return fmt.Errorf("template %s: still used by sandboxes: %w", name, errdefs.ErrConflict)
		}
		res, err := tx.Exec(ctx, `DELETE FROM templates WHERE name = $1`, name)
		if err != nil {
			return fmt.Errorf("template %s: delete: %w", name, err)
		}
		if res.RowsAffected() == 0 {
			return fmt.Errorf("template %s: %w", name, errdefs.ErrNotFound)
		}
		return nil
	})
}

const nodeColumns = `id, address, cpus, memory_mib, disk_mib, runtimes, state, registered_at, last_heartbeat`

func scanNode(sc interface{ Scan(...any) error }) (store.Node, error) {
	var n store.Node
	var runtimes string
	var registered, heartbeat int64
	err := sc.Scan(&n.ID, &n.Address, &n.Capacity.CPUs, &n.Capacity.MemoryMiB, &n.Capacity.DiskMiB,
		&runtimes, &n.State, &registered, &heartbeat)
	if err != nil {
		return store.Node{}, err
	}
	if runtimes != "" {
		n.Runtimes = strings.Split(runtimes, ",")
	}
	n.RegisteredAt, n.LastHeartbeat = fromTS(registered), fromTS(heartbeat)
	return n, nil
}

// PutNode implements store.Nodes.
func (s *Store) PutNode(ctx context.Context, n store.Node) error {
	if n.ID == "" {
		return fmt.Errorf("put node: empty id: %w", errdefs.ErrInvalidArgument)
	}
	for _, r := range n.Runtimes {
		if r == "" || strings.Contains(r, ",") {
			return fmt.Errorf("node %s: runtime name %q: must be non-empty without ',': %w", n.ID, r, errdefs.ErrInvalidArgument)
		}
	}
	at := now()
	if n.RegisteredAt.IsZero() {
		n.RegisteredAt = at
	}
	if n.LastHeartbeat.IsZero() {
		n.LastHeartbeat = at
	}
	return s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO nodes (`+nodeColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (id) DO UPDATE SET address = excluded.address, cpus = excluded.cpus,
			memory_mib = excluded.memory_mib, disk_mib = excluded.disk_mib, runtimes = excluded.runtimes,
			state = excluded.state, last_heartbeat = excluded.last_heartbeat`,
			n.ID, n.Address, n.Capacity.CPUs, n.Capacity.MemoryMiB, n.Capacity.DiskMiB,
			strings.Join(n.Runtimes, ","), string(n.State), ts(n.RegisteredAt), ts(n.LastHeartbeat))
		if err != nil {
			return fmt.Errorf("node %s: put: %w", n.ID, err)
		}
		return nil
	})
}

// GetNode implements store.Nodes.
func (s *Store) GetNode(ctx context.Context, id string) (store.Node, error) {
	n, err := scanNode(s.queryRow(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Node{}, fmt.Errorf("node %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return store.Node{}, fmt.Errorf("node %s: get: %w", id, err)
	}
	return n, nil
}

// ListNodes implements store.Nodes.
func (s *Store) ListNodes(ctx context.Context) ([]store.Node, error) {
	rows, err := s.query(ctx, `SELECT `+nodeColumns+` FROM nodes ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	defer rows.Close()
	out := []store.Node{}
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return out, nil
}

// Heartbeat implements store.Nodes.
func (s *Store) Heartbeat(ctx context.Context, id string, at time.Time) error {
	return s.write(ctx, func(tx pgx.Tx) error {
		res, err := tx.Exec(ctx, `UPDATE nodes SET last_heartbeat = $1 WHERE id = $2`, ts(at), id)
		if err != nil {
			return fmt.Errorf("node %s: heartbeat: %w", id, err)
		}
		if res.RowsAffected() == 0 {
			return fmt.Errorf("node %s: not registered: %w", id, errdefs.ErrNotFound)
		}
		return nil
	})
}

// DeleteNode implements store.Nodes.
func (s *Store) DeleteNode(ctx context.Context, id string) error {
	return s.write(ctx, func(tx pgx.Tx) error {
		res, err := tx.Exec(ctx, `DELETE FROM nodes WHERE id = $1`, id)
		if err != nil {
			return fmt.Errorf("node %s: delete: %w", id, err)
		}
		if res.RowsAffected() == 0 {
			return fmt.Errorf("node %s: %w", id, errdefs.ErrNotFound)
		}
		return nil
	})
}
