package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spacesandbox/space/internal/store/migrations"
	"github.com/spacesandbox/space/internal/store/sqlstore"
)

// migrationLock is the key of the session advisory lock held while the schema
// is checked and migrated ("SPACEmig" in ASCII). Advisory locks are per
// database, so two SPACE installations in two databases of one server do not
// wait on each other.
const migrationLock int64 = 0x53504143456d6967

// migrate brings the database up to the last of migs. The whole check runs
// under an advisory lock, so replicas starting at once take turns: the first
// applies the missing steps, the next find them applied. Each step runs in its
// own transaction together with its schema_migrations row (PostgreSQL's DDL is
// transactional), so a failed step leaves the database at the previous
// version. A database already past the last known version is refused: this
// binary would not understand its schema.
func migrate(ctx context.Context, s *Store, migs []migrations.Migration) (err error) {
	pc, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	defer pc.Release() // a closed connection is dropped, not pooled
	c := pc.Conn()
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
	if _, err := c.Exec(ctx, sqlstore.CreateMigrationsTable); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	current, err := schemaVersion(ctx, c)
	if err != nil {
		return err
	}
	pending, err := sqlstore.Pending(current, migs)
	if err != nil {
		return err
	}
	for _, m := range pending {
		if err := sqlstore.CheckNext(current, m); err != nil {
			return err
		}
		if err := applyOne(ctx, c, m); err != nil {
			return err
		}
		current = m.Version
	}
	return nil
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
	if _, err := tx.Exec(ctx, sqlstore.Rebind(sqlstore.RecordMigration),
		m.Version, m.Name, time.Now().UnixNano()); err != nil {
		return fmt.Errorf("migration %s: record version: %w", m.Name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migration %s: commit: %w", m.Name, err)
	}
	return nil
}
