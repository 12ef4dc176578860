package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/migrations"
	"github.com/spacesandbox/space/internal/store/postgres/pgtest"
	"github.com/spacesandbox/space/internal/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// openFresh opens a Store on a fresh database of the shared server.
func openFresh(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), pgtest.Database(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openFresh(t) })
}

// TestTwoReplicasOneWinner races conflicting updates of one sandbox from two
// Stores (two replicas, each with its own pool) that read the same version:
// in every round exactly one write lands and the other is ErrConflict.
func TestTwoReplicasOneWinner(t *testing.T) {
	ctx := t.Context()
	url := pgtest.Database(t)
	a, b := mustOpen(t, url), mustOpen(t, url)
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "shared"}
	if err := a.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	sb := sandbox.New(tn.ID, sandbox.Spec{Template: "minimal"}, now())
	if err := a.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	const rounds = 50
	for r := range rounds {
		cur, err := a.GetSandboxByID(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, s := range []*Store{a, b} {
			mine := cur.Clone()
			mine.Node = fmt.Sprintf("node-%d", i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = s.UpdateSandbox(ctx, mine)
			}()
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won >= 0:
				t.Fatalf("round %d: both replicas' writes of version %d landed", r, cur.Version)
			case err == nil:
				won = i
			case !errdefs.IsConflict(err):
				t.Fatalf("round %d: replica %d: %v, want success or ErrConflict", r, i, err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: no write landed: %v", r, errors.Join(errs...))
		}
		got, err := b.GetSandboxByID(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("node-%d", won); got.Node != want || got.Version != cur.Version+1 {
			t.Fatalf("round %d: stored node %q version %d, want the winner's %q %d", r, got.Node, got.Version, want, cur.Version+1)
		}
	}
}

// TestReplicasSerialize runs read-then-write transactions from two Stores
// that SQLite serializes by having a single writer: event sequence numbers
// and first-writer-wins idempotency keys. None may be lost or duplicated.
func TestReplicasSerialize(t *testing.T) {
	ctx := t.Context()
	url := pgtest.Database(t)
	a, b := mustOpen(t, url), mustOpen(t, url)
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "shared"}
	if err := a.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	const perWorker, workers = 20, 4
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker*2)
	winners := make(chan string, workers*perWorker)
	for w := range workers {
		s := []*Store{a, b}[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				if _, err := s.AppendEvent(ctx, store.Event{SandboxID: "sb-shared", Type: "state", Message: fmt.Sprint(w)}); err != nil {
					errs <- fmt.Errorf("worker %d: AppendEvent: %w", w, err)
				}
				rec := store.IdempotencyRecord{Tenant: tn.ID, Key: fmt.Sprintf("req-%d", i), Fingerprint: fmt.Sprint(w), Status: 200}
				got, err := s.PutIdempotency(ctx, rec)
				switch {
				case err == nil && got.Fingerprint == rec.Fingerprint:
					winners <- rec.Key
				case err != nil && !errdefs.IsConflict(err):
					errs <- fmt.Errorf("worker %d: PutIdempotency: %w", w, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	close(winners)
	for err := range errs {
		t.Error(err)
	}
	events, err := b.ListEvents(ctx, "sb-shared")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != workers*perWorker {
		t.Errorf("%d events stored, want %d", len(events), workers*perWorker)
	}
	for i, e := range events {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has Seq %d, want %d (gap or duplicate)", i, e.Seq, i+1)
		}
	}
	won := map[string]int{}
	for k := range winners {
		won[k]++
	}
	for i := range perWorker {
		if k := fmt.Sprintf("req-%d", i); won[k] != 1 {
			t.Errorf("key %s was first-written by %d workers, want exactly 1", k, won[k])
		}
	}
}

func mustOpen(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(t.Context(), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConcurrentMigrations opens one empty database from several Stores at
// once, as replicas starting together do: every Open succeeds and each step is
// applied exactly once.
func TestConcurrentMigrations(t *testing.T) {
	url := pgtest.Database(t)
	const replicas = 4
	var wg sync.WaitGroup
	stores := make([]*Store, replicas)
	errs := make([]error, replicas)
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = Open(t.Context(), url)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: Open: %v", i, err)
		}
		defer stores[i].Close()
	}
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	var n, max int
	if err := stores[0].queryRow(t.Context(), `SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&n, &max); err != nil {
		t.Fatal(err)
	}
	if n != len(all) || max != len(all) {
		t.Errorf("schema_migrations has %d rows up to version %d, want %d and %d (each step once)", n, max, len(all), len(all))
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

	url := pgtest.Database(t)
	s := mustOpen(t, url)
	if err := s.CreateTenant(ctx, store.Tenant{ID: "t-aaaaaaaaaaaaaaaa", Name: "kept"}); err != nil {
		t.Fatal(err)
	}
	if _, err := open(ctx, url, append(all, bad)); err == nil || !strings.Contains(err.Error(), "no_such_table") {
		t.Fatalf("open with a failing migration = %v, want the failing statement's error", err)
	}
	var n int
	if err := s.queryRow(ctx, `SELECT COUNT(*) FROM pg_tables WHERE tablename = 'half_done'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("failed migration left table half_done behind (count %d, %v)", n, err)
	}
	if v, _ := s.SchemaVersion(ctx); v != len(all) {
		t.Errorf("version after failed migration = %d, want %d", v, len(all))
	}
	for range 2 { // the second open must not re-apply the step
		s2, err := open(ctx, url, append(all, good))
		if err != nil {
			t.Fatalf("open with an added migration: %v", err)
		}
		if v, _ := s2.SchemaVersion(ctx); v != next {
			t.Errorf("version = %d, want %d", v, next)
		}
		var note string
		if err := s2.queryRow(ctx, `SELECT note FROM tenants WHERE id = 't-aaaaaaaaaaaaaaaa'`).Scan(&note); err != nil {
			t.Errorf("data or new column missing after upgrade: %v", err)
		}
		s2.Close()
	}
	_, err = Open(ctx, url)
	if !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("Open of a newer database = %v, want ErrFailedPrecondition", err)
	}
}

// TestOpenBadURL checks that a malformed or foreign URL is refused up front
// with ErrInvalidArgument and a message naming the problem (and never the
// password), and that an unreachable server is ErrUnavailable.
func TestOpenBadURL(t *testing.T) {
	for _, tc := range []struct {
		url, want string
	}{
		{"", "empty database URL"},
		{"   ", "empty database URL"},
		{"sqlite:///var/lib/space/space.db", `scheme "sqlite"`},
		{"mysql://u:hunter2@db/space", `scheme "mysql"`},
		{"just-a-word", "neither a postgres:// URL nor a key=value string"},
		{"postgres://u:hunter2@db:notaport/space", "does not parse"},
		{"postgres://u:hunter2@db/space?pool_max_conns=0", "pool_max_conns"},
		{"postgres://u:hunter2@db/space?pool_max_conns=x", "pool_max_conns"},
		{"postgres://u:hunter2@db/space?sslmode=bogus", "sslmode"},
		{"host=db password=hunter2 sslmode=bogus", "sslmode"},
	} {
		_, err := Open(t.Context(), tc.url)
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want ErrInvalidArgument mentioning %q", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q) error shows the password: %v", tc.url, err)
		}
	}
	// Nothing listens on a port that was just free.
	closed := fmt.Sprintf("postgres://space:hunter2@127.0.0.1:%d/space?sslmode=disable&connect_timeout=5", freePort(t))
	_, err := Open(t.Context(), closed)
	if !errdefs.IsUnavailable(err) || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Open of a closed port = %v, want ErrUnavailable without the password", err)
	}
}

// TestOpenTCPAndKeyValue opens the same database by a TCP URL, a
// key=value string and a Unix-socket URL with pool_max_conns.
func TestOpenTCPAndKeyValue(t *testing.T) {
	srv := pgtest.SharedServer(t)
	ctx := t.Context()
	name, err := srv.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.DropDatabase(context.Background(), name) })
	tcp := mustOpen(t, srv.TCPURL(name))
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "over tcp"}
	if err := tcp.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	kv := mustOpen(t, fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", srv.Dir, srv.Port, pgtest.SuperUser, name))
	if got, err := kv.GetTenant(ctx, tn.ID); err != nil || got.Name != tn.Name {
		t.Errorf("GetTenant by key=value DSN = %+v, %v", got, err)
	}
	small := mustOpen(t, srv.URL(name)+"&pool_max_conns=1")
	if n := small.pool.Stat().MaxConns(); n != 1 {
		t.Errorf("pool size = %d, want 1 from pool_max_conns", n)
	}
	// One connection serves concurrent callers in turn.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := small.ListTenants(ctx); err != nil {
				t.Errorf("ListTenants on a one-connection pool: %v", err)
			}
		}()
	}
	wg.Wait()
}

// freePort returns a port of 127.0.0.1 that nothing listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestServerClosedConnections closes every connection of the Store from the
// server side, as a restart or a fail-over does: the next reads and writes
// succeed on fresh connections instead of failing on the dead pooled ones.
func TestServerClosedConnections(t *testing.T) {
	ctx := t.Context()
	url := pgtest.Database(t)
	s := mustOpen(t, url)
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "a"}
	if err := s.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	// Fill the pool with idle connections.
	var wg sync.WaitGroup
	for range s.pool.Stat().MaxConns() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.queryRow(ctx, `SELECT pg_sleep(0.05)`).Scan(new(string))
		}()
	}
	wg.Wait()
	if idle := s.pool.Stat().IdleConns(); idle < 2 {
		t.Fatalf("%d idle connections, want several", idle)
	}
	killer := mustOpen(t, url)
	for _, step := range []struct {
		name string
		fn   func() error
	}{
		{"GetTenant", func() error { _, err := s.GetTenant(ctx, tn.ID); return err }},
		{"ListTenants", func() error { _, err := s.ListTenants(ctx); return err }},
		{"CreateTenant", func() error { return s.CreateTenant(ctx, store.Tenant{ID: sandbox.NewTenantID(), Name: "b"}) }},
	} {
		var n int
		if err := killer.queryRow(ctx, `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil || n == 0 {
			t.Fatalf("terminate the Store's connections: %d, %v", n, err)
		}
		if err := step.fn(); err != nil {
			t.Errorf("%s after the server closed the pooled connections: %v", step.name, err)
		}
	}
}

// TestUpgradeFromV1 writes data at schema version 1 (the first migration
// only), then opens the database with every migration: the later steps run
// over existing rows, and the data reads and writes as before.
func TestUpgradeFromV1(t *testing.T) {
	ctx := t.Context()
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	url := pgtest.Database(t)
	v1, err := open(ctx, url, all[:1])
	if err != nil {
		t.Fatalf("open at version 1: %v", err)
	}
	for _, stmt := range []string{
		`INSERT INTO tenants (id, name, created_at) VALUES ('t-aaaaaaaaaaaaaaaa', 'old', 1)`,
		`INSERT INTO api_keys (id, tenant_id, hash, admin, created_at, revoked_at) VALUES ('k-bbbbbbbbbbbbbbbb', 't-aaaaaaaaaaaaaaaa', 'h', TRUE, 2, NULL)`,
		`INSERT INTO sandboxes (id, tenant_id, name, template, runtime, cpus, memory_mib, disk_mib, env, metadata,
			created_at, expires_at, desired_state, state, reason, generation, node_id, exec_id, activation_id, version, updated_at)
			VALUES ('cccccccccccccccccccc', 't-aaaaaaaaaaaaaaaa', 'n', 'minimal', 'ns', 1, 128, 512, '{"A":"1"}', '{}',
			3, NULL, 'running', 'running', '', 3, 'node-1', 'e', 'a', 7, 4)`,
		`INSERT INTO templates (name, source, state, reason, size_bytes, created_at, updated_at) VALUES ('minimal', 'builtin:minimal', 'ready', '', 1, 1, 1)`,
	} {
		if err := v1.write(ctx, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, stmt); return err }); err != nil {
			t.Fatal(err)
		}
	}
	v1.Close()

	s := mustOpen(t, url)
	if v, err := s.SchemaVersion(ctx); err != nil || v != len(all) {
		t.Fatalf("SchemaVersion after upgrade = %d, %v; want %d", v, err, len(all))
	}
	sb, err := s.GetSandbox(ctx, "t-aaaaaaaaaaaaaaaa", "cccccccccccccccccccc")
	if err != nil {
		t.Fatalf("GetSandbox from v1 data: %v", err)
	}
	if sb.Generation != 3 || sb.Version != 7 || sb.Env["A"] != "1" || sb.Node != "node-1" || sb.StartFrom != "" ||
		sb.Egress != nil || sb.Project != "" || sb.IdleTimeout != 0 {
		t.Errorf("v1 sandbox read as %+v", sb)
	}
	if k, err := s.GetAPIKey(ctx, "k-bbbbbbbbbbbbbbbb"); err != nil || !k.Admin || k.Revoked() {
		t.Errorf("v1 key read as %+v, %v", k, err)
	}
	if tpl, err := s.GetTemplate(ctx, "minimal"); err != nil || tpl.Egress != "" {
		t.Errorf("v1 template read as %+v, %v", tpl, err)
	}
	sb.StartFrom, sb.Project = "sn-1", "p"
	if err := s.UpdateSandbox(ctx, sb); err != nil {
		t.Errorf("UpdateSandbox on upgraded database: %v", err)
	}
	if err := s.PutServicePort(ctx, store.ServicePort{Sandbox: sb.ID, Port: 80, Protocol: "http", Public: true}); err != nil {
		t.Errorf("PutServicePort on upgraded database: %v", err)
	}
	if _, err := s.AcquireLease(ctx, "leader", "r1", time.Minute); err != nil {
		t.Errorf("AcquireLease on upgraded database: %v", err)
	}
}

// TestCanceledContext: a canceled caller gets its context's error, not a
// claim that the database is unavailable, and the Store keeps working.
func TestCanceledContext(t *testing.T) {
	s := openFresh(t)
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := s.CreateTenant(ctx, store.Tenant{ID: "t-aaaaaaaaaaaaaaaa"})
	if !errors.Is(err, context.Canceled) || errdefs.IsUnavailable(err) {
		t.Errorf("CreateTenant with a canceled context = %v, want context.Canceled", err)
	}
	if _, err := s.GetTenant(ctx, "t-aaaaaaaaaaaaaaaa"); !errors.Is(err, context.Canceled) {
		t.Errorf("GetTenant with a canceled context = %v, want context.Canceled", err)
	}
	if err := s.CreateTenant(t.Context(), store.Tenant{ID: "t-aaaaaaaaaaaaaaaa"}); err != nil {
		t.Errorf("CreateTenant after a canceled call: %v", err)
	}
}
