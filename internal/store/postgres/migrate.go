package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store/migrations"
)

// migrationLock is the key of the session advisory lock held while the schema
// is checked and migrated ("SPACEmig" in ASCII). Advisory locks are per
// database, so two SPACE installations in two databases of one server do not
// wait on each other.
const migrationLock int64 = 0x53504143456d6967

const createMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at BIGINT  NOT NULL
)`

// migrate brings the database up to the last of migs. The whole check runs
// under an advisory lock, so replicas starting at once take turns: the first
// applies the missing steps, the next find them applied. Each step runs in its
// own transaction together with its schema_migrations row (PostgreSQL's DDL is
// transactional), so a failed step leaves the database at the previous
// version. A database already past the last known version is refused: this
// binary would not understand its schema.
func migrate(ctx context.Context, p *pool, migs []migrations.Migration) (err error) {
	c, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	defer p.release(c)
	if _, err := c.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLock); err != nil {
		return fmt.Errorf("wait for the migration lock: %w", err)
	}
	defer func() {
		// Unlock even when ctx is done; if that fails too, closing the
		// session releases the lock.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, uerr := c.Exec(uctx, `SELECT pg_advisory_unlock($1)`, migrationLock); uerr != nil {
			err = errors.Join(err, closeConn(c))
		}
	}()
	if _, err := c.Exec(ctx, createMigrationsTable); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	latest := 0
	if len(migs) > 0 {
		latest = migs[len(migs)-1].Version
	}
	current, err := schemaVersion(ctx, c)
	if err != nil {
		return err
	}
	if current > latest {
		return fmt.Errorf("database schema is version %d but this binary knows only up to %d; run a newer space: %w",
			current, latest, errdefs.ErrFailedPrecondition)
	}
	for _, m := range migs {
		if m.Version <= current {
			continue
		}
		if m.Version != current+1 {
			return fmt.Errorf("migration %s: database is at version %d, want %d: %w", m.Name, current, m.Version-1, errdefs.ErrFailedPrecondition)
		}
		if err := applyOne(ctx, c, m); err != nil {
			return err
		}
		current = m.Version
	}
	return nil
}

// SchemaVersion returns the schema version recorded in the database.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v *int64
	err := s.queryRow(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if v == nil {
		return 0, nil
	}
	return int(*v), nil
}

func schemaVersion(ctx context.Context, c *pgx.Conn) (int, error) {
	var v *int64
	if err := c.QueryRow(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if v == nil {
		return 0, nil
	}
	return int(*v), nil
}

// applyOne applies m and records it, in one transaction.
func applyOne(ctx context.Context, c *pgx.Conn, m migrations.Migration) (err error) {
	tx, err := c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migration %s: begin: %w", m.Name, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreClosed(tx.Rollback(ctx)))
		}
	}()
	// Without arguments pgx sends the file as one simple query, which may
	// hold several statements.
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		return fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
		m.Version, m.Name, ts(now())); err != nil {
		return fmt.Errorf("migration %s: record version: %w", m.Name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migration %s: commit: %w", m.Name, err)
	}
	return nil
}
