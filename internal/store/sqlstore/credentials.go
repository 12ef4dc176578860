package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

const credentialColumns = `id, tenant_id, project, sandbox_id, name, metadata, created_at`

func scanCredential(sc Row) (store.Credential, error) {
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
	return s.db.Write(ctx, func(tx Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO credentials (`+credentialColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			c.ID, c.Tenant, c.Project, c.Sandbox, c.Name, c.Metadata, ts(c.CreatedAt))
		if s.d.IsUnique(err) {
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
	c, err := scanCredential(s.db.QueryRow(ctx,
		`SELECT `+credentialColumns+` FROM credentials WHERE id = ? AND tenant_id = ?`, id, tenant))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.Credential{}, fmt.Errorf("credential %s: %w", id, errdefs.ErrNotFound)
	case err != nil:
		return store.Credential{}, fmt.Errorf("credential %s: get: %w", id, err)
	}
	return c, nil
}

// ListCredentials implements store.Credentials.
func (s *Store) ListCredentials(ctx context.Context, tenant string) ([]store.Credential, error) {
	out, err := queryAll(ctx, s.db, scanCredential, `SELECT `+credentialColumns+` FROM credentials WHERE tenant_id = ? ORDER BY created_at, id`, tenant)
	if err != nil {
		return nil, fmt.Errorf("list credentials: %w", err)
	}
	return out, nil
}

// DeleteCredential implements store.Credentials.
func (s *Store) DeleteCredential(ctx context.Context, id string) error {
	return s.writeOne(ctx, "credential "+id, "delete", `DELETE FROM credentials WHERE id = ?`, id)
}
