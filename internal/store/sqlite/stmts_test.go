package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/store/sqlstore"
)

// TestStatementsAreCachedPerPool: a query read twice is prepared once; one
// run in a transaction (whose connection is the writer's only one) is
// prepared after the commit, not inside it, and used by the next; and the
// cache stops growing at its bound.
func TestStatementsAreCachedPerPool(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := (*conns)(s)
	const q = "SELECT COUNT(*) FROM sandboxes"
	for range 2 {
		var n int
		if err := c.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.rs.m) != 1 || s.rs.m[q] == nil {
		t.Errorf("read cache = %v, want the one query", s.rs.m)
	}
	write := func() {
		t.Helper()
		if err := c.Write(ctx, func(tx sqlstore.Tx) error {
			var n int
			return tx.QueryRow(ctx, q).Scan(&n)
		}); err != nil {
			t.Fatal(err)
		}
	}
	write()
	if s.ws.m[q] == nil || len(s.ws.wanted) != 0 {
		t.Fatalf("after a transaction: writer cache %v, wanted %v; want the query prepared after the commit", s.ws.m, s.ws.wanted)
	}
	write() // runs the cached statement in the transaction
	for i := range maxCachedStatements + 10 {
		var n int
		if err := c.QueryRow(ctx, fmt.Sprintf("SELECT %d", i)).Scan(&n); err != nil || n != i {
			t.Fatalf("SELECT %d = %d, %v", i, n, err)
		}
	}
	if len(s.rs.m) != maxCachedStatements {
		t.Errorf("read cache holds %d statements, want the bound %d", len(s.rs.m), maxCachedStatements)
	}
}
