// Package sqlite is the embedded Store backend: one SQLite file through the
// pure-Go modernc.org/sqlite driver, for a single control-plane process.
//
// Connections: SQLite allows one writer at a time, so the Store keeps two
// pools. Writes go through a pool of exactly one connection whose transactions
// begin IMMEDIATE (they take the write lock up front, so a read-then-write
// transaction cannot fail half-way with SQLITE_BUSY); in-process writers queue
// for that connection instead of spinning on the lock, and the writes that
// queued while a transaction ran are committed together in the next one,
// each in its own savepoint (group.go). Reads go through a
// separate pool of query-only connections, which WAL mode lets run beside the
// writer. A busy timeout covers other processes holding the lock (the CLI
// reading the same file, a backup), and a write that still meets
// SQLITE_BUSY is retried a few times with backoff.
//
// Foreign keys are on for every connection. The schema and its migrations
// (../migrations) and the table logic — queries, row scanning, error classes
// (../sqlstore) — are shared with the PostgreSQL backend; this package gives
// them its connections (db.go) and answers the few questions whose answer
// is SQLite's own.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/migrations"
	"github.com/spacesandbox/space/internal/store/sqlstore"
	sqlitedrv "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

const (
	busyTimeout   = 10 * time.Second
	readPoolSize  = 8
	writeAttempts = 5
)

// Store is a store.Store on one SQLite file. Its methods but Close are those of
// sqlstore.Store, the table logic it shares with the PostgreSQL backend; this
// package gives that its connections.
type Store struct {
	*tables
	w  *sql.DB // exactly one connection: the only writer
	r  *sql.DB // query-only connections for reads
	ws *stmtCache
	rs *stmtCache
	g  group // the writes waiting for w (group.go)
}

// tables is embedded under an unexported name, so that Store's fields stay
// private while the table methods are promoted.
type tables = sqlstore.Store

var (
	_ store.Store         = (*Store)(nil)
	_ store.SandboxEvents = (*Store)(nil)
)

// Open opens (creating if needed) the database at path, brings its schema up
// to date and returns the Store. A database written by a newer SPACE (with
// migrations this binary does not know) is refused with ErrFailedPrecondition.
func Open(ctx context.Context, path string) (*Store, error) {
	all, err := migrations.All()
	if err != nil {
		return nil, err
	}
	return open(ctx, path, all)
}

// open is Open with the migrations given, so tests can run upgrades.
func open(ctx context.Context, path string, migs []migrations.Migration) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?#\x00") {
		return nil, fmt.Errorf("sqlite: database path %q: must be non-empty without '?', '#' or NUL: %w", path, errdefs.ErrInvalidArgument)
	}
	w, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := migrate(ctx, w, migs); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s for reading: %w", path, err)
	}
	r.SetMaxOpenConns(readPoolSize)
	s := &Store{w: w, r: r, ws: newStmtCache(w), rs: newStmtCache(r)}
	s.tables = sqlstore.New((*conns)(s), dialect{})
	return s, nil
}

// dsn returns the modernc.org/sqlite data source name for path.
func dsn(path string, writer bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	if writer {
		q.Add("_pragma", "journal_mode(WAL)")
		// NORMAL is durable in WAL mode except for the last transactions
		// before a power loss; the reconciler re-drives from what survived.
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "query_only(1)")
	}
	return path + "?" + q.Encode()
}

// Close closes both pools.
func (s *Store) Close() error {
	s.rs.close()
	s.ws.close()
	return errors.Join(s.r.Close(), s.w.Close())
}

// writeAlone runs fn in a write transaction of its own, retrying when the
// database is locked by another process past the busy timeout.
func (s *Store) writeAlone(ctx context.Context, fn func(tx *sql.Tx) error) error {
	var err error
	for attempt := range writeAttempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return errors.Join(ctx.Err(), err)
			case <-time.After(backoff(attempt)):
			}
		}
		err = s.writeOnce(ctx, fn)
		if !isBusy(err) {
			return err
		}
	}
	return fmt.Errorf("database stayed locked after %d attempts: %w: %w", writeAttempts, errdefs.ErrUnavailable, err)
}

// backoff is the wait before write attempt n (from 1).
func backoff(attempt int) time.Duration {
	return time.Duration(attempt*attempt) * 50 * time.Millisecond
}

func sleepBackoff(attempt int) { time.Sleep(backoff(attempt)) }

func (s *Store) writeOnce(ctx context.Context, fn func(tx *sql.Tx) error) error {
	s.g.txs.Add(1)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// sqliteCode returns the extended SQLite result code of err, or 0; its low
// byte is the primary code.
func sqliteCode(err error) int {
	var se *sqlitedrv.Error
	if errors.As(err, &se) {
		return se.Code()
	}
	return 0
}

func isBusy(err error) bool {
	c := sqliteCode(err) & 0xff
	return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
}

// now returns the current time at the precision the store keeps.
func now() time.Time { return time.Now().UTC().Round(0) }
