package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/spacesandbox/space/internal/store/sqlstore"
	sqlite3 "modernc.org/sqlite/lib"
)

// conns is the Store's connections as the shared table logic runs
// statements on them (sqlstore.DB): writes in an IMMEDIATE transaction on the
// single writer, reads on the query-only pool.
type conns Store

// Write implements sqlstore.DB.
func (c *conns) Write(ctx context.Context, fn func(sqlstore.Tx) error) error {
	err := (*Store)(c).write(ctx, func(t *sql.Tx, grouped bool) error { return fn(tx{t, c.ws, grouped}) })
	c.ws.prepareWanted(ctx)
	return err
}

// QueryRow implements sqlstore.DB.
func (c *conns) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	if st := c.rs.get(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return c.r.QueryRowContext(ctx, query, args...)
}

// Query implements sqlstore.DB.
func (c *conns) Query(ctx context.Context, query string, args ...any) (sqlstore.Rows, error) {
	var rows *sql.Rows
	var err error
	if st := c.rs.get(ctx, query); st != nil {
		rows, err = st.QueryContext(ctx, args...)
	} else {
		rows, err = c.r.QueryContext(ctx, query, args...)
	}
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// tx is a write transaction as sqlstore.Tx, running the writer's cached
// statements. In a group commit (grouped) its statements run without their
// context's cancellation: SQLite's interrupt of a statement can roll back
// the whole transaction, which other callers' writes share.
type tx struct {
	t       *sql.Tx
	stmts   *stmtCache
	grouped bool
}

func (t tx) stmtCtx(ctx context.Context) context.Context {
	if t.grouped {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// Exec implements sqlstore.Tx.
func (t tx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	ctx = t.stmtCtx(ctx)
	var res sql.Result
	var err error
	if st := t.stmts.lookup(query); st != nil {
		res, err = t.t.StmtContext(ctx, st).ExecContext(ctx, args...)
	} else {
		res, err = t.t.ExecContext(ctx, query, args...)
	}
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// QueryRow implements sqlstore.Tx.
func (t tx) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	ctx = t.stmtCtx(ctx)
	if st := t.stmts.lookup(query); st != nil {
		return t.t.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.t.QueryRowContext(ctx, query, args...)
}

// dialect answers the table logic's questions about SQLite.
type dialect struct{}

// IsUnique implements sqlstore.Dialect.
func (dialect) IsUnique(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

// IsForeignKey implements sqlstore.Dialect.
func (dialect) IsForeignKey(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}

// LeaseNow implements sqlstore.Dialect: this machine's clock, which every
// process writing the file runs on.
func (dialect) LeaseNow(context.Context, sqlstore.Tx) (time.Time, error) { return now(), nil }
