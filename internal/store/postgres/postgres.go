// Package postgres is the Store backend for several control-plane replicas: a
// PostgreSQL database (version 13 or newer) reached through
// github.com/jackc/pgx/v5, with the schema and migrations (../migrations) and
// the table logic (../sqlstore, its ? placeholders rebound to $n) shared with
// the SQLite backend.
//
// Transactions: the SQLite backend gets serial execution for free (one writer
// at a time), and its read-then-write transactions rely on it: an event's
// sequence number is MAX(seq)+1, a tenant is deleted only if no sandbox names
// it, an idempotency key is inserted only if absent. Here every write
// transaction runs at SERIALIZABLE isolation, so PostgreSQL guarantees the
// same outcome as some serial order of the transactions of every replica, and
// aborts one of two that would interleave badly with a serialization failure
// (SQLSTATE 40001) or a deadlock (40P01). Such a transaction is retried from
// the start, a bounded number of times with jittered backoff; then the error is
// ErrUnavailable. Reads run outside transactions (each statement sees the
// latest committed state), as the SQLite backend's reads do.
//
// Optimistic concurrency is the same as on SQLite: UpdateSandbox writes only
// when the stored version is the one the caller read, and a different one is
// ErrConflict, whichever replica wrote it.
//
// Migrations run under a PostgreSQL advisory lock, so replicas started at once
// apply each step exactly once; the others wait and find the schema current.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/migrations"
	"github.com/spacesandbox/space/internal/store/sqlstore"
)

const (
	// defaultMaxConns is the pool size when the URL names none
	// (pool_max_conns).
	defaultMaxConns = 8
	// maxMaxConns bounds pool_max_conns: PostgreSQL's own default
	// max_connections is 100 for all replicas together.
	maxMaxConns = 1000
	// connectTimeout bounds dialing when the URL sets no connect_timeout.
	connectTimeout = 10 * time.Second
	// writeAttempts bounds the retries of a write transaction aborted by a
	// serialization failure or a deadlock.
	writeAttempts = 10
)

// Store is a store.Store on a PostgreSQL database. Its methods but Close are
// those of sqlstore.Store, the table logic it shares with the SQLite backend;
// this package gives that its connections.
type Store struct {
	*tables
	pool   *pgxpool.Pool
	cfg    *pgx.ConnConfig // of the pool's connections, for the side connections
	closed atomic.Bool
}

// tables is embedded under an unexported name, so that Store's fields stay
// private while the table methods are promoted.
type tables = sqlstore.Store

var (
	_ store.Store         = (*Store)(nil)
	_ store.SandboxEvents = (*Store)(nil)
)

// Open connects to the database named by dbURL, brings its schema up to date
// and returns the Store. dbURL is a postgres:// or postgresql:// URL
// (postgres://user:password@host:5432/space?sslmode=require) or a libpq
// key=value string ("host=/run/postgresql dbname=space"); both take libpq's
// parameters, and a URL may also set pool_max_conns (default 8) and
// pgxpool's other pool_* parameters (pool.go). A database
// written by a newer SPACE (with migrations this binary does not know) is
// refused with ErrFailedPrecondition; an unreachable server is ErrUnavailable.
func Open(ctx context.Context, dbURL string) (*Store, error) {
	all, err := migrations.All()
	if err != nil {
		return nil, err
	}
	return open(ctx, dbURL, all)
}

// open is Open with the migrations given, so tests can run upgrades.
func open(ctx context.Context, dbURL string, migs []migrations.Migration) (*Store, error) {
	cfg, err := parseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	p, err := newPool(cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{pool: p, cfg: cfg.ConnConfig}
	s.tables = sqlstore.New((*conns)(s), dialect{})
	if err := migrate(ctx, s, migs); err != nil {
		s.Close()
		return nil, fmt.Errorf("postgres: database %s on %s: %w", s.cfg.Database, s.cfg.Host, err)
	}
	return withChangeTrigger(ctx, s) // notify.go
}

// parseConfig checks dbURL and turns it into a pool configuration. Errors
// never repeat a password.
func parseConfig(dbURL string) (*pgxpool.Config, error) {
	maxConns := defaultMaxConns
	shown := "(key=value string)"
	switch {
	case strings.TrimSpace(dbURL) == "":
		return nil, fmt.Errorf("postgres: empty database URL; want postgres://USER@HOST/DATABASE: %w", errdefs.ErrInvalidArgument)
	case strings.Contains(dbURL, "://"):
		u, err := url.Parse(dbURL)
		if err != nil {
			return nil, fmt.Errorf("postgres: database URL does not parse (%v); want postgres://USER@HOST/DATABASE: %w",
				redactParseError(err), errdefs.ErrInvalidArgument)
		}
		shown = u.Redacted()
		if u.Scheme != "postgres" && u.Scheme != "postgresql" {
			return nil, fmt.Errorf("postgres: database URL %s: scheme %q, want postgres:// or postgresql://: %w",
				shown, u.Scheme, errdefs.ErrInvalidArgument)
		}
		if v := u.Query().Get("pool_max_conns"); v != "" {
			n, err := poolMaxConns(shown, v)
			if err != nil {
				return nil, err
			}
			maxConns = n
		}
	case !strings.Contains(dbURL, "="):
		return nil, fmt.Errorf("postgres: database %q is neither a postgres:// URL nor a key=value string: %w",
			dbURL, errdefs.ErrInvalidArgument)
	default: // a key=value string: pgx finds pool_max_conns among the rest
		if cc, err := pgx.ParseConfig(dbURL); err == nil {
			if v, ok := cc.RuntimeParams["pool_max_conns"]; ok {
				n, err := poolMaxConns(shown, v)
				if err != nil {
					return nil, err
				}
				maxConns = n
			}
		}
	}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		// pgconn redacts the password from its parse errors.
		return nil, fmt.Errorf("postgres: database %s: %w: %w", shown, errdefs.ErrInvalidArgument, err)
	}
	cfg.MaxConns = int32(maxConns)
	cc := cfg.ConnConfig
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = connectTimeout
	}
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		cc.RuntimeParams["application_name"] = "space"
	}
	return cfg, nil
}

// poolMaxConns parses and bounds the pool_max_conns of the database shown.
func poolMaxConns(shown, v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxMaxConns {
		return 0, fmt.Errorf("postgres: database URL %s: pool_max_conns %q: want 1 to %d: %w",
			shown, v, maxMaxConns, errdefs.ErrInvalidArgument)
	}
	return n, nil
}

// redactParseError returns the message of a url.Parse error without the URL,
// which may hold a password.
func redactParseError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return "malformed URL"
}

// Close closes the Store's connections, waiting for those in use to be
// handed back; later calls fail with ErrFailedPrecondition.
func (s *Store) Close() error {
	if !s.closed.Swap(true) {
		s.pool.Close()
	}
	return nil
}

// write runs fn in a SERIALIZABLE transaction, retrying it from the start when
// PostgreSQL aborts it to keep the transactions of all replicas serializable.
// fn must wrap database errors with %w so that they can be recognised.
func (s *Store) write(ctx context.Context, fn func(tx pgx.Tx) error) error {
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
		if !retryable(err) {
			return err
		}
	}
	return fmt.Errorf("transaction aborted by concurrent writers %d times: %w: %w", writeAttempts, errdefs.ErrUnavailable, err)
}

// backoff is the wait before retry attempt (1, 2, …): exponential from 2ms,
// capped at 250ms, with full jitter so that the aborted parties do not meet
// again in step.
func backoff(attempt int) time.Duration {
	d := min(2*time.Millisecond<<attempt, 250*time.Millisecond)
	return d/2 + rand.N(d/2+1)
}

func (s *Store) writeOnce(ctx context.Context, fn func(tx pgx.Tx) error) error {
	c, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	if err != nil && c.Conn().IsClosed() {
		// A pooled connection the server has closed (a restart, a
		// fail-over, an idle timeout): nothing ran, so run again.
		s.discardIdle()
		return fmt.Errorf("begin: %w: %w", errStaleConn, err)
	}
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, ignoreClosed(tx.Rollback(ctx)))
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func ignoreClosed(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return err
}

// scanner is a row or rows positioned on a row.
type scanner interface{ Scan(dest ...any) error }

// lazyRow is a one-row query run when it is scanned, on a pooled connection.
type lazyRow struct {
	ctx  context.Context
	s    *Store
	q    string
	args []any
}

// Scan implements scanner. A read that fails because the server closed a
// pooled connection runs once more on another: reads may repeat.
func (r lazyRow) Scan(dest ...any) error {
	for attempt := 0; ; attempt++ {
		c, err := r.s.acquire(r.ctx)
		if err != nil {
			return err
		}
		err = c.QueryRow(r.ctx, r.q, r.args...).Scan(dest...)
		closed := c.Conn().IsClosed()
		c.Release()
		if err == nil || !closed || attempt > 0 || r.ctx.Err() != nil {
			return err
		}
		r.s.discardIdle()
	}
}

// queryRow returns a row of query q outside a transaction; no row is
// pgx.ErrNoRows from its Scan.
func (s *Store) queryRow(ctx context.Context, q string, args ...any) scanner {
	return lazyRow{ctx, s, q, args}
}

// rows are the rows of a query; Close hands their connection back.
type rows struct {
	pgx.Rows
	release func()
	// peeked is set while the answer of a first Next, taken to see whether
	// the query failed, is still to be given: has.
	peeked, has bool
}

// Next implements pgx.Rows.
func (r *rows) Next() bool {
	if r.peeked {
		r.peeked = false
		return r.has
	}
	return r.Rows.Next()
}

// Close closes the rows and hands their connection back. It implements
// sqlstore.Rows; a failure is reported by Err.
func (r *rows) Close() error {
	r.Rows.Close()
	if r.release != nil {
		r.release()
		r.release = nil
	}
	return nil
}

// query runs q outside a transaction; the caller must Close the rows. Like
// lazyRow, it tries again once on another connection when the server closed
// the first.
func (s *Store) query(ctx context.Context, q string, args ...any) (*rows, error) {
	for attempt := 0; ; attempt++ {
		c, err := s.acquire(ctx)
		if err != nil {
			return nil, err
		}
		rs, err := c.Query(ctx, q, args...)
		if err == nil {
			// pgx reports most failures only once the rows are read.
			has := rs.Next()
			if has || rs.Err() == nil || !c.Conn().IsClosed() || attempt > 0 {
				return &rows{Rows: rs, release: c.Release, peeked: true, has: has}, nil
			}
			err = rs.Err()
			rs.Close()
		}
		closed := c.Conn().IsClosed()
		c.Release()
		if !closed || attempt > 0 || ctx.Err() != nil {
			return nil, err
		}
		s.discardIdle()
	}
}

// errStaleConn marks a transaction that failed at its start because the
// server had closed the pooled connection; it is retried.
var errStaleConn = errors.New("connection closed by the server")

// pgCode returns the SQLSTATE of err, or "".
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// SQLSTATEs the store tells apart.
const (
	codeUniqueViolation      = "23505"
	codeForeignKeyViolation  = "23503"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
)

// retryable reports an error after which the whole transaction may simply
// run again: PostgreSQL aborted it for a concurrent one, or a pooled
// connection turned out broken before anything was sent. A server that cannot
// be reached at all is not retried here: the caller hears at once.
func retryable(err error) bool {
	if err == nil || errdefs.IsUnavailable(err) {
		return false
	}
	switch pgCode(err) {
	case codeSerializationFailure, codeDeadlockDetected:
		return true
	}
	if errors.Is(err, errStaleConn) {
		return true
	}
	return pgconn.SafeToRetry(err)
}

// now returns the current time at the precision the store keeps.
func now() time.Time { return time.Now().UTC().Round(0) }
