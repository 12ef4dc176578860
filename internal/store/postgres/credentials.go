package postgres

import (
	"context"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

const credentialColumns = `id, tenant_id, project, sandbox_id, name, metadata, created_at`

func scanCredential(sc interface{ Scan(...any) error }) (store.Credential, error) {
	var c store.Credential
	var created int64
	err := sc.Scan(&c.ID, &c.Tenant, &c.Project, &c.Sandbox, &c.Name, &c.Metadata, &created)
	c.CreatedAt = fromTS(created)
	return c, err
}

// CreateCredential implements store.Credentials.
func (s *Store) CreateCredential(ctx context.Context, c store.Credential) error {
	if c.ID == "" || c.Tenant == "" {
		return fmt.Errorf("create credential: empty id or tenant: %w", errdefs.ErrInvalidArgument)
	}
	return s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO credentials (`+credentialColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			c.ID, c.Tenant, c.Project, c.Sandbox, c.Name, c.Metadata, ts(c.CreatedAt))
		if isUnique(err) {
			return fmt.Errorf("credential %s: already exists: %w", c.ID, errdefs.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("credential %s: create: %w", c.ID, err)
		}
		return nil
	})
}

// GetCredential implements store.Credentials.
func (s *Store) GetCredential(ctx context.Context, tenant, id string) (store.Credential, error) {
	c, err := scanCredential(s.queryRow(ctx,
		`SELECT `+credentialColumns+` FROM credentials WHERE id = $1 AND tenant_id = $2`, id, tenant))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.Credential{}, fmt.Errorf("credential %s: %w", id, errdefs.ErrNotFound)
	case err != nil:
		return store.Credential{}, fmt.Errorf("credential %s: get: %w", id, err)
	}
	return c, nil
}

// ListCredentials implements store.Credentials.
func (s *Store) ListCredentials(ctx context.Context, tenant string) ([]store.Credential, error) {
	rows, err := s.query(ctx,
		`SELECT `+credentialColumns+` FROM credentials WHERE tenant_id = $1 ORDER BY created_at, id`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list credentials: %w", err)
	}
	defer rows.Close()
	out := []store.Credential{}
	for rows.Next() {
		c, err := scanCredential(rows)
		if err != nil {
			return nil, fmt.Errorf("list credentials: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list credentials: %w", err)
	}
	return out, nil
}

// DeleteCredential implements store.Credentials.
func (s *Store) DeleteCredential(ctx context.Context, id string) error {
	return s.write(ctx, func(tx pgx.Tx) error {
		res, err := tx.Exec(ctx, `DELETE FROM credentials WHERE id = $1`, id)
		if err != nil {
			return fmt.Errorf("credential %s: delete: %w", id, err)
		}
		if res.RowsAffected() == 0 {
			return fmt.Errorf("credential %s: %w", id, errdefs.ErrNotFound)
		}
		return nil
	})
}
