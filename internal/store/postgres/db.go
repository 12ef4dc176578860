package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spacesandbox/space/internal/store/sqlstore"
)

// conns is the Store's pool as the shared table logic runs statements on it
// (sqlstore.DB): writes in a SERIALIZABLE transaction retried when
// PostgreSQL aborts it, reads outside transactions. Every query is rebound
// from ? to $n placeholders on its way.
type conns Store

// Write implements sqlstore.DB.
func (c *conns) Write(ctx context.Context, fn func(sqlstore.Tx) error) error {
	return (*Store)(c).write(ctx, func(t pgx.Tx) error { return fn(tx{t}) })
}

// QueryRow implements sqlstore.DB.
func (c *conns) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return (*Store)(c).queryRow(ctx, rebind(query), args...)
}

// Query implements sqlstore.DB.
func (c *conns) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	rows, err := (*Store)(c).query(ctx, rebind(query), args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// tx is a write transaction as sqlstore.Tx.
type tx struct{ t pgx.Tx }

// Exec implements sqlstore.Tx.
func (t tx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := t.t.Exec(ctx, rebind(query), args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// QueryRow implements sqlstore.Tx.
func (t tx) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return t.t.QueryRow(ctx, rebind(query), args...)
}

// dialect answers the table logic's questions about PostgreSQL.
type dialect struct{}

// IsUnique implements sqlstore.Dialect.
func (dialect) IsUnique(err error) bool { return pgCode(err) == codeUniqueViolation }

// IsForeignKey implements sqlstore.Dialect.
func (dialect) IsForeignKey(err error) bool { return pgCode(err) == codeForeignKeyViolation }

// LeaseNow implements sqlstore.Dialect: the database server's clock, read in
// the writing transaction, so that replicas whose clocks drift apart still
// agree on when a lease expires. clock_timestamp, not now(): a retried
// transaction must not reuse an old reading.
func (dialect) LeaseNow(ctx context.Context, tx sqlstore.Tx) (time.Time, error) {
	var us int64
	err := tx.QueryRow(ctx, `SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT`).Scan(&us)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return time.UnixMicro(us).UTC(), nil
}

// maxRebound bounds the queries rebind remembers. The table logic's queries
// are a fixed set (a few dozen, with the variants of the list filters); the
// bound only keeps a future query built from data from growing the cache.
const maxRebound = 1024

// rebound maps a query with ? placeholders to its $n form; reboundN counts
// its entries.
var (
	rebound  sync.Map
	reboundN atomic.Int64
)

// rebind is sqlstore.Rebind, remembered: a statement runs on every request,
// and rewriting its text each time would cost more than looking it up.
func rebind(query string) string {
	if q, ok := rebound.Load(query); ok {
		return q.(string)
	}
	q := sqlstore.Rebind(query)
	if reboundN.Load() < maxRebound {
		if _, loaded := rebound.LoadOrStore(query, q); !loaded {
			reboundN.Add(1)
		}
	}
	return q
}
