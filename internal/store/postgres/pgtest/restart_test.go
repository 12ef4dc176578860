package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestRestart: committed rows survive an immediate restart, connections
// open before it are cut, and new ones reach the same server again.
func TestRestart(t *testing.T) {
	srv := Start(t)
	url := srv.NewDatabase(t)
	ctx := t.Context()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, `CREATE TABLE t (v int); INSERT INTO t VALUES (42)`); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `SELECT 1`); err == nil {
		t.Error("a connection opened before the restart still works: it was not a restart")
	}
	c2, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect after the restart: %v", err)
	}
	defer c2.Close(context.WithoutCancel(ctx))
	var v int
	if err := c2.QueryRow(ctx, `SELECT v FROM t`).Scan(&v); err != nil || v != 42 {
		t.Fatalf("row after the restart: %d, %v", v, err)
	}
}
