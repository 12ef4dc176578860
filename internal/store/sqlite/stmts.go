package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// maxCachedStatements bounds a statement cache. The table logic's queries
// are constants or built from a few filter fields, so the distinct texts
// are a few dozen; a cache that is full prepares the rest per call.
const maxCachedStatements = 512

// stmtCache keeps one prepared statement per query text on a pool: SQLite
// compiles a statement in about as long as it runs a point query, so the
// store's hot reads and writes pay that once per connection, not per call
// (database/sql prepares a cached *sql.Stmt again on each connection it
// meets, and a transaction borrows its connection's copy).
type stmtCache struct {
	db     *sql.DB
	mu     sync.Mutex
	m      map[string]*sql.Stmt
	wanted map[string]bool // met inside a transaction, prepared after it (prepareWanted)
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, m: make(map[string]*sql.Stmt), wanted: make(map[string]bool)}
}

// get returns the prepared statement for query, or nil when the cache is
// full or preparing failed (the caller then runs query unprepared, and
// meets the error there).
func (c *stmtCache) get(ctx context.Context, query string) *sql.Stmt {
	c.mu.Lock()
	st, ok := c.m[query]
	full := len(c.m) >= maxCachedStatements
	c.mu.Unlock()
	if ok || full {
		return st
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.m[query]; ok {
		st.Close()
		return prev
	}
	c.m[query] = st
	return st
}

// lookup returns the cached statement for query without preparing it; a
// miss is noted for prepareWanted. A transaction holds the writer's only
// connection, so it cannot prepare on the pool itself.
func (c *stmtCache) lookup(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.m[query]
	if !ok && len(c.m)+len(c.wanted) < maxCachedStatements {
		c.wanted[query] = true
	}
	return st
}

// prepareWanted prepares the statements lookup missed, once the
// connection is free again.
func (c *stmtCache) prepareWanted(ctx context.Context) {
	c.mu.Lock()
	var qs []string
	for q := range c.wanted {
		qs = append(qs, q)
		delete(c.wanted, q)
	}
	c.mu.Unlock()
	for _, q := range qs {
		c.get(ctx, q)
	}
}

// close closes every cached statement.
func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for q, st := range c.m {
		st.Close()
		delete(c.m, q)
	}
}
