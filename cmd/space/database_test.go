package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/postgres/pgtest"
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
		if _, ok := st.(cachedSQLite); !ok {
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
	if _, ok := st.(interface{ Len() (int, int) }); ok {
		t.Error("openDatabase(postgres) is cached: a key revoked through another replica would still be served here")
	}
}

// TestSecondServerOnOneSQLiteFileIsRefused: the cache is right only while
// one process writes the file, so a second server on it does not start; it
// does once the first closed the store.
func TestSecondServerOnOneSQLiteFileIsRefused(t *testing.T) {
	defer func(w time.Duration) { sqliteLockWait = w }(sqliteLockWait)
	sqliteLockWait = 300 * time.Millisecond
	dir := t.TempDir()
	first, err := openDatabase(t.Context(), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	// The store is usable, and the optional abilities are still found.
	if _, ok := first.(store.SandboxEvents); !ok {
		t.Error("the cached SQLite store lost SandboxEvents")
	}
	if _, err := first.GetTenant(t.Context(), "t-none"); !errdefs.IsNotFound(err) {
		t.Errorf("GetTenant of a missing tenant = %v, want ErrNotFound", err)
	}
	second, err := openDatabase(t.Context(), dir, "sqlite://"+filepath.Join(dir, "space.db"))
	if err == nil {
		second.Close()
		t.Fatal("a second server opened the SQLite file the first one holds")
	}
	if !strings.Contains(err.Error(), "another space server uses the SQLite database") {
		t.Errorf("second open: %v, want it to say another server uses the file", err)
	}
	first.Close()
	again, err := openDatabase(t.Context(), dir, "")
	if err != nil {
		t.Fatalf("open after the first closed: %v", err)
	}
	again.Close()
}
