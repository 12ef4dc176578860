package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/spacesandbox/space/internal/store/migrations"
	"github.com/spacesandbox/space/internal/store/sqlstore"
)

// migrate brings db up to the last of migs. Each migration runs in its own
// transaction together with its schema_migrations row, so a failed step leaves
// the database at the previous version (SQLite's DDL is transactional). A
// database already past the last known version is refused: this binary would
// not understand its schema.
func migrate(ctx context.Context, db *sql.DB, migs []migrations.Migration) error {
	if _, err := db.ExecContext(ctx, sqlstore.CreateMigrationsTable); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	current, err := schemaVersion(ctx, db)
	if err != nil {
		return err
	}
	pending, err := sqlstore.Pending(current, migs)
	if err != nil {
		return err
	}
	for _, m := range pending {
		if err := applyOne(ctx, db, m); err != nil {
			return err
		}
	}
	return nil
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func schemaVersion(ctx context.Context, q queryer) (int, error) {
	var v sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return int(v.Int64), nil
}

// applyOne applies m unless the database already has it. The version is read
// inside the (immediate, so exclusive) transaction, so two processes opening
// the same file cannot both apply a step.
func applyOne(ctx context.Context, db *sql.DB, m migrations.Migration) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %s: begin: %w", m.Name, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreDone(tx.Rollback()))
		}
	}()
	current, err := schemaVersion(ctx, tx)
	if err != nil {
		return err
	}
	if current >= m.Version {
		return tx.Rollback()
	}
	if err := sqlstore.CheckNext(current, m); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, sqlstore.RecordMigration,
		m.Version, m.Name, now().UnixNano()); err != nil {
		return fmt.Errorf("migration %s: record version: %w", m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %s: commit: %w", m.Name, err)
	}
	return nil
}
