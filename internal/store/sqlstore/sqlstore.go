// Package sqlstore is the table logic the SQL backends of store.Store share:
// every query, every row scan and the error class of every outcome, written
// once. A backend (../sqlite, ../postgres) keeps what is really its own —
// opening and pooling connections, the transactions its database needs to
// run writes one at a time or as if they did, retrying the ones it aborts,
// migrations — and hands the table logic a DB to run statements on and a
// Dialect for the few questions whose answer depends on the database.
//
// Queries are written with ? placeholders, in SQL both databases accept
// (INSERT … ON CONFLICT … DO UPDATE, COALESCE, LIMIT). A backend whose
// database numbers its placeholders ($1, $2, … in PostgreSQL) rewrites each
// query with Rebind before it sends it.
//
// Times are stored as Unix nanoseconds in BIGINT columns, NULL for the zero
// time where a column may be empty; JSON and bytes are stored as text.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// DB is a database as the table logic uses it.
type DB interface {
	// Write runs fn in a transaction whose outcome is that of some serial
	// order of every write to the database, by this process or another.
	// When the database aborts it for a concurrent one, Write runs fn
	// again from the start: fn must set its results afresh on each run.
	// fn wraps the errors of its statements with %w, so that Write can
	// tell which ones to retry.
	Write(ctx context.Context, fn func(tx Tx) error) error
	// QueryRow runs a query for one row outside a transaction; it sees
	// every write committed before it started. No row is sql.ErrNoRows
	// from Scan.
	QueryRow(ctx context.Context, query string, args ...any) Row
	// Query runs a query outside a transaction; the caller closes the rows.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// Tx is a write transaction (see DB.Write).
type Tx interface {
	// Exec runs a statement and returns how many rows it changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// QueryRow runs a query for one row; no row is sql.ErrNoRows from Scan.
	QueryRow(ctx context.Context, query string, args ...any) Row
}

// Row is the result of QueryRow.
type Row interface {
	Scan(dest ...any) error
}

// Rows is the result of Query: *sql.Rows, or a backend's equivalent.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// Dialect answers what the table logic cannot say in SQL common to both
// databases.
type Dialect interface {
	// IsUnique reports an error of a statement that would have duplicated
	// a primary or unique key.
	IsUnique(err error) bool
	// IsForeignKey reports an error of a statement that would have left a
	// reference to a row that does not exist.
	IsForeignKey(err error) bool
	// LeaseNow returns the time leases are measured by, read in tx: a
	// clock every process writing the database agrees on.
	LeaseNow(ctx context.Context, tx Tx) (time.Time, error)
}

// Store implements every method of store.Store but Close (the backend
// owns the connections) on a DB.
type Store struct {
	db DB
	d  Dialect
}

// New returns the table logic on db, answering dialect questions with d.
func New(db DB, d Dialect) *Store {
	return &Store{db: db, d: d}
}

// SchemaVersion returns the schema version recorded in the database (the
// highest migration applied; 0 for none).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v *int64
	if err := s.db.QueryRow(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if v == nil {
		return 0, nil
	}
	return int(*v), nil
}

// ts encodes a time for a NOT NULL column.
func ts(t time.Time) int64 { return t.UnixNano() }

// nullTS encodes a time for a nullable column: the zero time is NULL.
func nullTS(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	n := t.UnixNano()
	return &n
}

// fromTS decodes a NOT NULL time column.
func fromTS(n int64) time.Time { return time.Unix(0, n).UTC() }

// fromNullTS decodes a nullable time column.
func fromNullTS(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return fromTS(*n)
}

// now returns the current time at the precision the store keeps.
func now() time.Time { return time.Now().UTC().Round(0) }

// exists reports whether query (a SELECT 1 …) returns a row.
func exists(ctx context.Context, tx Tx, query string, args ...any) (bool, error) {
	var one int
	err := tx.QueryRow(ctx, query, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

var _ interface {
	store.Tenants
	store.APIKeys
	store.Sandboxes
	store.Templates
	store.Nodes
	store.NodeReports
	store.Idempotency
	store.Events
	store.Snapshots
	store.Credentials
	store.ServicePorts
	store.Leases
	store.MetricHistory
	store.TemplateBuilds
} = (*Store)(nil)

// queryAll runs a read and scans each of its rows with scan. No row is an
// empty, non-nil list.
func queryAll[T any](ctx context.Context, db DB, scan func(Row) (T, error), query string, args ...any) ([]T, error) {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// writeOne runs one statement that must change a row, in a write
// transaction of its own. Changing none is ErrNotFound. Errors name what the
// row is ("sandbox sb-1") and op.
func (s *Store) writeOne(ctx context.Context, what, op, query string, args ...any) error {
	return s.db.Write(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", what, op, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: %w", what, errdefs.ErrNotFound)
		}
		return nil
	})
}
