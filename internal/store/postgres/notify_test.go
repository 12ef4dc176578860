package postgres

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/postgres/pgtest"
)

// watcher records what one WatchSandboxChanges reports.
type watcher struct {
	changed chan string
	missed  chan error
	done    chan error
}

// startWatching runs s's watch of sandbox changes (pinging after idle) until
// the test ends, and waits until it listens.
func startWatching(t *testing.T, s *Store, idle time.Duration) *watcher {
	t.Helper()
	w := &watcher{changed: make(chan string, 100), missed: make(chan error, 10), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		w.done <- watch(ctx, listenerConfig(s.cfg), idle,
			func(id string) { w.changed <- id },
			func(cause error) { w.missed <- cause })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-w.done:
			if err != nil {
				t.Errorf("WatchSandboxChanges returned %v after its context ended, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("WatchSandboxChanges did not return 10s after its context ended")
		}
	})
	if cause := w.wantMissed(t); cause != nil {
		t.Fatalf("first missed(%v), want a nil cause", cause)
	}
	return w
}

// wantMissed waits for a call of missed and returns its cause.
func (w *watcher) wantMissed(t *testing.T) error {
	t.Helper()
	select {
	case cause := <-w.missed:
		return cause
	case <-time.After(20 * time.Second):
		t.Fatal("missed not called within 20s")
		return nil
	}
}

// wantChanged waits for the next announced id and checks it is want: an
// unexpected id in between fails the test.
func (w *watcher) wantChanged(t *testing.T, what, want string) {
	t.Helper()
	select {
	case got := <-w.changed:
		if got != want {
			t.Fatalf("%s: announced %q, want %q", what, got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: %s not announced within 10s", what, want)
	}
}

// newTestSandbox stores a tenant and a sandbox of it through s.
func newTestSandbox(t *testing.T, s *Store) *sandbox.Sandbox {
	t.Helper()
	ctx := t.Context()
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "notify", CreatedAt: time.Now().UTC()}
	if err := s.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	sb := sandbox.New(tn.ID, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256, DiskMiB: 512}, time.Now().UTC())
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	return sb
}

// TestSandboxChangesAnnounced writes through one Store (a replica) and hears
// each change through another's listener; a write that changes nothing (a
// stale version) is not announced.
func TestSandboxChangesAnnounced(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.Database(t)
	listener, writer := mustOpen(t, url), mustOpen(t, url)
	w := startWatching(t, listener, listenIdle)

	sb := newTestSandbox(t, writer)
	w.wantChanged(t, "create", sb.ID)
	stale := *sb
	sb.State = sandbox.StateRunning
	if err := writer.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	w.wantChanged(t, "update", sb.ID)
	if err := writer.UpdateSandbox(ctx, &stale); err == nil {
		t.Fatal("update from a stale version succeeded")
	}
	other := newTestSandbox(t, writer)
	// The refused update sent nothing: the next id is the other sandbox's.
	w.wantChanged(t, "create after a refused update", other.ID)
	if err := writer.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	w.wantChanged(t, "delete", sb.ID)
}

// TestSandboxChangesAfterBackendKill terminates the listening connection's
// server process: the listener reconnects, says what it may have missed, and
// hears the next change.
func TestSandboxChangesAfterBackendKill(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	listener, writer := mustOpen(t, url), mustOpen(t, url)
	w := startWatching(t, listener, listenIdle)
	pid := listenerPID(t, writer)
	var killed bool
	if err := writer.queryRow(t.Context(), `SELECT pg_terminate_backend($1)`, pid).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, killed, err)
	}
	if cause := w.wantMissed(t); cause == nil {
		t.Error("missed after the connection was killed has a nil cause")
	}
	if again := listenerPID(t, writer); again == pid {
		t.Errorf("listening on backend %d again, the one that was terminated", pid)
	}
	sb := newTestSandbox(t, writer)
	w.wantChanged(t, "create after the reconnect", sb.ID)
}

// TestSandboxChangesAfterFrozenBackend stops the listening connection's
// server process (SIGSTOP): no error ever comes, the connection just goes
// silent, as across a partition. The idle ping finds out.
func TestSandboxChangesAfterFrozenBackend(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	listener, writer := mustOpen(t, url), mustOpen(t, url)
	w := startWatching(t, listener, 200*time.Millisecond)
	pid := listenerPID(t, writer)
	if err := syscall.Kill(int(pid), syscall.SIGSTOP); err != nil {
		t.Skipf("cannot stop backend %d (%v): the test needs to signal PostgreSQL's processes", pid, err)
	}
	// Thawed before the database is dropped, which waits for it to exit.
	t.Cleanup(func() { syscall.Kill(int(pid), syscall.SIGCONT) })
	began := time.Now()
	if cause := w.wantMissed(t); cause == nil || !strings.Contains(cause.Error(), "ping") {
		t.Errorf("missed(%v) after the backend froze, want the failed ping", cause)
	}
	if waited := time.Since(began); waited > 10*time.Second {
		t.Errorf("a frozen connection was noticed after %v, want within idle + ping timeout (%v)", waited, 200*time.Millisecond+listenPingTimeout)
	}
	sb := newTestSandbox(t, writer)
	w.wantChanged(t, "create after the reconnect", sb.ID)
}

// listenerPID returns the server process of the one listening connection
// of the database s is on.
func listenerPID(t *testing.T, s *Store) int32 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var pids []int32
		rs, err := s.query(t.Context(), `SELECT pid FROM pg_stat_activity
            WHERE datname = current_database() AND application_name LIKE '%/changes'`)
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var pid int32
			if err := rs.Scan(&pid); err != nil {
				t.Fatal(err)
			}
			pids = append(pids, pid)
		}
		rs.Close()
		if len(pids) == 1 {
			return pids[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("listening connections: %v, want one", pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSandboxChangesIgnoreForeignPayloads sends what a hostile or buggy
// client of the database could on the channel: nothing of it is passed on.
func TestSandboxChangesIgnoreForeignPayloads(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.Database(t)
	listener, writer := mustOpen(t, url), mustOpen(t, url)
	w := startWatching(t, listener, listenIdle)
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, p := range []string{
		"", " ", "../../etc/passwd", "x' OR '1'='1", strings.Repeat("a", 7999),
		"\x01\x02", "ééééé", "sb_not-an-id", sandbox.NewTenantID(),
	} {
		if _, err := c.Exec(ctx, `SELECT pg_notify($1, $2)`, changesChannel, p); err != nil {
			t.Fatalf("notify %q: %v", p, err)
		}
	}
	sb := newTestSandbox(t, writer)
	w.wantChanged(t, "the sandbox created after the foreign payloads", sb.ID)
}

// TestChangeTriggerInstalledOnce opens one database from several Stores at
// once: each Open succeeds and the database has one trigger.
func TestChangeTriggerInstalledOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(t.Context(), url)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
		}
	}
	s := mustOpen(t, url)
	var n int
	err := s.queryRow(t.Context(), `SELECT COUNT(*) FROM pg_trigger WHERE tgrelid = 'sandboxes'::regclass AND tgname = $1`, changesTrigger).Scan(&n)
	if err != nil || n != 1 {
		t.Fatalf("%s triggers on sandboxes: %d, %v; want 1", changesTrigger, n, err)
	}
}

func TestChangedID(t *testing.T) {
	id := sandbox.NewID()
	for _, tc := range []struct {
		name string
		n    *pgconn.Notification
		want string
	}{
		{"sandbox id", &pgconn.Notification{Channel: changesChannel, Payload: id}, id},
		{"nil", nil, ""},
		{"other channel", &pgconn.Notification{Channel: "other", Payload: id}, ""},
		{"empty", &pgconn.Notification{Channel: changesChannel}, ""},
		{"id with a suffix", &pgconn.Notification{Channel: changesChannel, Payload: id + "/x"}, ""},
		{"tenant id", &pgconn.Notification{Channel: changesChannel, Payload: sandbox.NewTenantID()}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := changedID(tc.n)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("changedID = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}

// FuzzChangedID checks that nothing but a sandbox id, unchanged, gets
// through.
func FuzzChangedID(f *testing.F) {
	f.Add(sandbox.NewID())
	f.Add("")
	f.Add("../../x")
	f.Fuzz(func(t *testing.T, payload string) {
		got, ok := changedID(&pgconn.Notification{Channel: changesChannel, Payload: payload})
		if ok && (got != payload || !sandbox.ValidID(got)) {
			t.Fatalf("changedID(%q) = %q, true", payload, got)
		}
		if !ok && sandbox.ValidID(payload) {
			t.Fatalf("changedID refused the sandbox id %q", payload)
		}
	})
}
