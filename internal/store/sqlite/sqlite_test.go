package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/migrations"
	"github.com/spacesandbox/space/internal/store/storetest"
)

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t) })
}

func TestOpenSettings(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	var mode string
	if err := s.r.QueryRowContext(t.Context(), `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	for _, db := range []*sql.DB{s.r, s.w} {
		var fk, busy int
		if err := db.QueryRowContext(t.Context(), `PRAGMA foreign_keys`).Scan(&fk); err != nil || fk != 1 {
			t.Errorf("foreign_keys = %d, %v; want 1", fk, err)
		}
		if err := db.QueryRowContext(t.Context(), `PRAGMA busy_timeout`).Scan(&busy); err != nil || busy <= 0 {
			t.Errorf("busy_timeout = %d, %v; want > 0", busy, err)
		}
	}
	if _, err := s.r.ExecContext(t.Context(), `DELETE FROM tenants`); err == nil {
		t.Error("reader pool accepted a write; want query-only")
	}
}

func TestOpenRejectsBadPath(t *testing.T) {
	for _, p := range []string{"", "a?b", "x#y", "nul\x00"} {
		if _, err := Open(t.Context(), p); !errdefs.IsInvalidArgument(err) {
			t.Errorf("Open(%q) = %v, want ErrInvalidArgument", p, err)
		}
	}
}

// loadFixture builds a database file from a SQL dump in testdata.
func loadFixture(t *testing.T, name string) string {
	t.Helper()
	dump, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "space.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), string(dump)); err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	return path
}

// TestUpgradeFromV1 opens a database written at schema version 1 and checks
// that this binary migrates it and reads its data.
func TestUpgradeFromV1(t *testing.T) {
	path := loadFixture(t, "v1.sql")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open v1 database: %v", err)
	}
	defer s.Close()
	all, _ := migrations.All()
	if v, err := s.SchemaVersion(t.Context()); err != nil || v != len(all) {
		t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, len(all))
	}
	sb, err := s.GetSandbox(t.Context(), "t-aaaaaaaaaaaaaaaa", "cccccccccccccccccccc")
	if err != nil {
		t.Fatalf("GetSandbox from v1 data: %v", err)
	}
	if sb.Generation != 3 || sb.Version != 7 || sb.Env["A"] != "1" || sb.State != sandbox.StateRunning ||
		sb.Node != "node-1" || sb.StartFrom != "" {
		t.Errorf("v1 sandbox read as %+v", sb)
	}
	// A sandbox from before egress policies has none of its own: the
	// control plane's default applies to it.
	if sb.Egress != nil {
		t.Errorf("v1 sandbox has egress policy %s, want none", sandbox.EgressJSON(sb.Egress))
	}
	k, err := s.GetAPIKey(t.Context(), "k-bbbbbbbbbbbbbbbb")
	if err != nil || !k.Admin || k.Revoked() {
		t.Errorf("v1 key read as %+v, %v", k, err)
	}
	rec, err := s.GetIdempotency(t.Context(), "t-aaaaaaaaaaaaaaaa", "req-1")
	if err != nil || string(rec.Body) != "{}" {
		t.Errorf("v1 idempotency record read as %+v, %v", rec, err)
	}
	// The upgraded database takes writes, to old tables and new ones.
	sb.StartFrom = "sn-1"
	if err := s.UpdateSandbox(t.Context(), sb); err != nil {
		t.Errorf("UpdateSandbox on upgraded database: %v", err)
	}
	got, err := s.GetSandboxByID(t.Context(), sb.ID)
	if err != nil {
		t.Fatalf("GetSandboxByID on upgraded database: %v", err)
	}
	if got.StartFrom != "sn-1" {
		t.Errorf("StartFrom on upgraded database = %q, want sn-1", got.StartFrom)
	}
	p, err := egress.ParsePolicy([]byte(`{"allow_internet":false,"allow":{"domains":["example.com"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	got.Egress = p
	if err := s.UpdateSandbox(t.Context(), got); err != nil {
		t.Fatalf("UpdateSandbox with a policy on upgraded database: %v", err)
	}
	if got, err = s.GetSandboxByID(t.Context(), sb.ID); err != nil || got.Egress == nil || got.Egress.Spec().Allow.Domains[0] != "example.com" {
		t.Errorf("egress on upgraded database = %+v, %v", got, err)
	}
	sn := store.Snapshot{ID: "sn-1", SandboxID: sb.ID, Tenant: sb.Tenant, Kind: store.SnapshotDisk, State: store.SnapshotReady}
	if err := s.CreateSnapshot(t.Context(), sn); err != nil {
		t.Errorf("CreateSnapshot on upgraded database: %v", err)
	}
	if list, err := s.ListSnapshots(t.Context(), store.SnapshotFilter{SandboxID: sb.ID}); err != nil || len(list) != 1 {
		t.Errorf("ListSnapshots on upgraded database = %d, %v; want 1", len(list), err)
	}
}

// TestMigrationSteps runs the migration machinery with extra steps: a good
// step is applied once and recorded, a failing step leaves nothing behind,
// and a database newer than the binary is refused.
func TestMigrationSteps(t *testing.T) {
	ctx := t.Context()
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	next := len(all) + 1
	good := migrations.Migration{Version: next, Name: fmt.Sprintf("%04d_note", next),
		SQL: `ALTER TABLE tenants ADD COLUMN note TEXT NOT NULL DEFAULT ''; CREATE INDEX tenants_by_note ON tenants (note);`}
	bad := migrations.Migration{Version: next, Name: fmt.Sprintf("%04d_broken", next),
		SQL: `CREATE TABLE half_done (a INTEGER); INSERT INTO no_such_table VALUES (1);`}

	path := filepath.Join(t.TempDir(), "space.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTenant(ctx, store.Tenant{ID: "t-aaaaaaaaaaaaaaaa", Name: "kept"}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	if _, err := open(ctx, path, append(all, bad)); err == nil {
		t.Fatal("open with a failing migration succeeded")
	}
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatalf("Open after failed migration: %v", err)
	}
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE name = 'half_done'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("failed migration left table half_done behind (count %d, %v)", n, err)
	}
	if v, _ := s.SchemaVersion(ctx); v != len(all) {
		t.Errorf("version after failed migration = %d, want %d", v, len(all))
	}
	s.Close()

	for range 2 { // the second open must not re-apply the step
		s, err = open(ctx, path, append(all, good))
		if err != nil {
			t.Fatalf("open with an added migration: %v", err)
		}
		if v, _ := s.SchemaVersion(ctx); v != next {
			t.Errorf("version = %d, want %d", v, next)
		}
		var note string
		if err := s.r.QueryRowContext(ctx, `SELECT note FROM tenants WHERE id = 't-aaaaaaaaaaaaaaaa'`).Scan(&note); err != nil {
			t.Errorf("data or new column missing after upgrade: %v", err)
		}
		s.Close()
	}

	_, err = Open(ctx, path)
	if !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("Open of a newer database = %v, want ErrFailedPrecondition", err)
	}
}

// TestTwoStoresOneFile runs writers in two Store values on one file, as two
// processes would: the busy timeout and retries must absorb the lock.
func TestTwoStoresOneFile(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "space.db")
	a, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "shared"}
	if err := a.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	const perStore = 25
	var wg sync.WaitGroup
	errs := make(chan error, 2*perStore)
	for _, s := range []*Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perStore {
				sb := sandbox.New(tn.ID, sandbox.Spec{Template: "minimal"}, now())
				if err := s.CreateSandbox(ctx, sb); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("CreateSandbox: %v", err)
	}
	list, err := b.ListSandboxes(ctx, store.SandboxFilter{Tenant: tn.ID})
	if err != nil || len(list) != 2*perStore {
		t.Fatalf("ListSandboxes = %d, %v; want %d", len(list), err, 2*perStore)
	}
}

// TestEgressColumn: no policy is stored as the empty string; a stored policy that no
// longer parses is an error on read, never a silently wider policy.
func TestEgressColumn(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "a"}
	if err := s.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	sb := sandbox.New(tn.ID, sandbox.Spec{Template: "minimal"}, now())
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	var col string
	if err := s.r.QueryRowContext(ctx, `SELECT egress FROM sandboxes WHERE id = ?`, sb.ID).Scan(&col); err != nil || col != "" {
		t.Fatalf("egress column = %q, %v; want ''", col, err)
	}
	sb.Egress = sandbox.DefaultEgress()
	if err := s.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := s.r.QueryRowContext(ctx, `SELECT egress FROM sandboxes WHERE id = ?`, sb.ID).Scan(&col); err != nil ||
		col != `{"allow_internet":true,"allow":{},"deny":{}}` {
		t.Fatalf("egress column = %q, %v", col, err)
	}
	if _, err := s.w.ExecContext(ctx, `UPDATE sandboxes SET egress = '{"alow":{}}' WHERE id = ?`, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSandboxByID(ctx, sb.ID); err == nil || !strings.Contains(err.Error(), "egress") {
		t.Errorf("GetSandboxByID of a corrupt policy = %v, want an egress decode error", err)
	}
	if _, err := s.ListSandboxes(ctx, store.SandboxFilter{}); err == nil {
		t.Error("ListSandboxes with a corrupt policy succeeded")
	}
}

func TestCanceledContext(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.CreateTenant(ctx, store.Tenant{ID: "t-aaaaaaaaaaaaaaaa"}); err == nil {
		t.Error("CreateTenant with a canceled context succeeded")
	}
}
