package main

import (
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/store/postgres/pgtest"
	"github.com/spacesandbox/space/internal/store/readcache"
)

// TestOnlySQLiteIsCached: the server keeps API keys and sandboxes in memory
// on SQLite, whose only writer it is, and never on PostgreSQL, where another
// replica's revocation would not reach this one's cache.
func TestOnlySQLiteIsCached(t *testing.T) {
	dir := t.TempDir()
	for _, dbURL := range []string{"", "sqlite://" + filepath.Join(dir, "other.db")} {
		st, err := openDatabase(t.Context(), dir, dbURL)
		if err != nil {
			t.Fatalf("openDatabase(%q): %v", dbURL, err)
		}
		if _, ok := st.(*readcache.Store); !ok {
			t.Errorf("openDatabase(%q) = %T, want the SQLite store behind readcache", dbURL, st)
		}
		st.Close()
	}
	pg := pgtest.Start(t)
	st, err := openDatabase(t.Context(), dir, pg.URL("postgres"))
	if err != nil {
		t.Fatalf("openDatabase(postgres): %v", err)
	}
	defer st.Close()
	if _, ok := st.(*readcache.Store); ok {
		t.Error("openDatabase(postgres) is cached: a key revoked through another replica would still be served here")
	}
}
