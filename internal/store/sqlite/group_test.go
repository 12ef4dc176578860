package sqlite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlstore"
)

// holdWriter starts a write that holds the writer until the returned
// release is called, and waits until it runs.
func holdWriter(t *testing.T, s *Store) (release func() error) {
	t.Helper()
	running, hold, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- (*conns)(s).Write(t.Context(), func(sqlstore.Tx) error {
			close(running)
			<-hold
			return nil
		})
	}()
	<-running
	return func() error { close(hold); return <-done }
}

// waitQueued waits until n writes queue behind the held writer.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.g.mu.Lock()
		q := len(s.g.queue)
		s.g.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func tenantExists(t *testing.T, s *Store, id string) bool {
	t.Helper()
	_, err := s.GetTenant(t.Context(), id)
	if err != nil && !errdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestGroupCommit: writes that queue while one transaction runs commit in
// one transaction, and each gets its own answer: a duplicate gets its
// conflict, a write whose function fails leaves nothing of itself, a
// canceled one is not applied, and every other one is committed.
func TestGroupCommit(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	const n = 30
	id := func(i int) string { return fmt.Sprintf("t-%016d", i) }
	for i := 0; i < n; i += 5 {
		if err := s.CreateTenant(ctx, store.Tenant{ID: id(i), Name: "existing"}); err != nil {
			t.Fatal(err)
		}
	}
	release := holdWriter(t, s)
	before := s.g.txs.Load()
	errs := make([]error, n+2)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = s.CreateTenant(ctx, store.Tenant{ID: id(i), Name: "new"}) })
	}
	// One that writes, then fails: its insert must be rolled back alone.
	failed := errors.New("the function failed after its insert")
	wg.Go(func() {
		errs[n] = (*conns)(s).Write(ctx, func(tx sqlstore.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO tenants (id, name, created_at) VALUES ('t-failedfailedfail', 'x', 1)`); err != nil {
				return err
			}
			return failed
		})
	})
	// One whose caller gives up while it is queued.
	cctx, cancel := context.WithCancel(ctx)
	wg.Go(func() { errs[n+1] = s.CreateTenant(cctx, store.Tenant{ID: "t-canceledcancele", Name: "gone"}) })
	waitQueued(t, s, n+2)
	cancel()
	time.Sleep(10 * time.Millisecond) // the canceled one withdraws
	if err := release(); err != nil {
		t.Fatalf("held write: %v", err)
	}
	wg.Wait()
	if got := s.g.txs.Load() - before; got != 1 {
		t.Errorf("%d queued writes took %d transactions after the held one, want 1", n+2, got)
	}
	for i := range n {
		if i%5 == 0 {
			if !errdefs.IsConflict(errs[i]) {
				t.Errorf("duplicate tenant %s: %v, want a conflict", id(i), errs[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Errorf("tenant %s: %v", id(i), errs[i])
		}
		if tn, err := s.GetTenant(ctx, id(i)); err != nil || tn.Name != "new" {
			t.Errorf("tenant %s after the group: %+v, %v", id(i), tn, err)
		}
	}
	if !errors.Is(errs[n], failed) {
		t.Errorf("failing write: %v, want its own error", errs[n])
	}
	if tenantExists(t, s, "t-failedfailedfail") {
		t.Error("the failing write's insert was committed")
	}
	if !errors.Is(errs[n+1], context.Canceled) {
		t.Errorf("canceled write: %v, want context.Canceled", errs[n+1])
	}
	if tenantExists(t, s, "t-canceledcancele") {
		t.Error("the canceled write was committed")
	}
}

// TestGroupSeesEarlierWrites: a write in a group sees what the writes
// before it in the group did, as it would after their commits (a quota
// admission in a burst counts the sandboxes admitted just before it).
func TestGroupSeesEarlierWrites(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	release := holdWriter(t, s)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = s.CreateTenant(ctx, store.Tenant{ID: "t-sameidsameidsam", Name: "first"}) })
	waitQueued(t, s, 1)
	wg.Go(func() { errs[1] = s.CreateTenant(ctx, store.Tenant{ID: "t-sameidsameidsam", Name: "second"}) })
	waitQueued(t, s, 2)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if errs[0] != nil || !errdefs.IsConflict(errs[1]) {
		t.Fatalf("two creates of one id in a group: %v, %v; want nil, a conflict", errs[0], errs[1])
	}
	if tn, err := s.GetTenant(ctx, "t-sameidsameidsam"); err != nil || tn.Name != "first" {
		t.Fatalf("tenant = %+v, %v; want the first", tn, err)
	}
}

// TestGroupThatBreaksRunsAlone: a write that ends the shared transaction
// under the others (here by rolling it back itself) costs the group its
// transaction; each write then runs alone and gets its own answer.
func TestGroupThatBreaksRunsAlone(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	release := holdWriter(t, s)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = s.CreateTenant(ctx, store.Tenant{ID: "t-aaaaaaaaaaaaaaaa", Name: "a"}) })
	waitQueued(t, s, 1)
	wg.Go(func() {
		errs[1] = (*conns)(s).Write(ctx, func(tx sqlstore.Tx) error {
			_, err := tx.Exec(ctx, `ROLLBACK`)
			return err
		})
	})
	waitQueued(t, s, 2)
	wg.Go(func() { errs[2] = s.CreateTenant(ctx, store.Tenant{ID: "t-bbbbbbbbbbbbbbbb", Name: "b"}) })
	waitQueued(t, s, 3)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("the others: %v, %v; want both committed", errs[0], errs[2])
	}
	if errs[1] == nil {
		t.Error("the write that rolled the transaction back succeeded")
	}
	for _, id := range []string{"t-aaaaaaaaaaaaaaaa", "t-bbbbbbbbbbbbbbbb"} {
		if !tenantExists(t, s, id) {
			t.Errorf("tenant %s was not committed", id)
		}
	}
}

// TestLoneWriteIsNotGrouped: a write that finds the writer idle runs at
// once in a transaction of its own.
func TestLoneWriteIsNotGrouped(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	before := s.g.txs.Load()
	for i := range 3 {
		if err := s.CreateTenant(t.Context(), store.Tenant{ID: fmt.Sprintf("t-%016d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.g.txs.Load() - before; got != 3 {
		t.Fatalf("3 serial writes took %d transactions", got)
	}
}

// TestGroupSkipsACallerWhoLeft: a write whose context ends after the group
// took it, before its turn, is not applied and gets its context's error
// (its statements would run without its cancellation otherwise).
func TestGroupSkipsACallerWhoLeft(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	release := holdWriter(t, s)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() {
		errs[0] = (*conns)(s).Write(ctx, func(sqlstore.Tx) error { cancel(); return nil })
	})
	waitQueued(t, s, 1)
	wg.Go(func() { errs[1] = s.CreateTenant(cctx, store.Tenant{ID: "t-leftleftleftlef", Name: "left"}) })
	waitQueued(t, s, 2)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if errs[0] != nil || !errors.Is(errs[1], context.Canceled) {
		t.Fatalf("answers %v, %v; want nil, context.Canceled", errs[0], errs[1])
	}
	if tenantExists(t, s, "t-leftleftleftlef") {
		t.Fatal("the write of a caller who left was committed")
	}
}

// TestGroupPanicReachesItsCaller: a write function that panics in a group
// panics in its own caller's goroutine, as it would alone; the group's
// other writes commit and the writer stays usable.
func TestGroupPanicReachesItsCaller(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	release := holdWriter(t, s)
	errs := make([]error, 2)
	var recovered any
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = s.CreateTenant(ctx, store.Tenant{ID: "t-aaaaaaaaaaaaaaaa", Name: "a"}) })
	waitQueued(t, s, 1)
	wg.Go(func() {
		defer func() { recovered = recover() }()
		(*conns)(s).Write(ctx, func(sqlstore.Tx) error { panic("boom") })
	})
	waitQueued(t, s, 2)
	wg.Go(func() { errs[1] = s.CreateTenant(ctx, store.Tenant{ID: "t-bbbbbbbbbbbbbbbb", Name: "b"}) })
	waitQueued(t, s, 3)
	if err := release(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if recovered != "boom" {
		t.Errorf("the panicking write's caller recovered %v, want boom", recovered)
	}
	if errs[0] != nil || errs[1] != nil {
		t.Errorf("the others: %v, %v", errs[0], errs[1])
	}
	if err := s.CreateTenant(ctx, store.Tenant{ID: "t-cccccccccccccccc"}); err != nil {
		t.Errorf("a write after the panic: %v", err)
	}
}
