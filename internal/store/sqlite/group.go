package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Group commit. SQLite has one writer, so concurrent writes queue for it;
// under a burst (50 creates at once: each a create commit and a settle) the
// queue, not the work, was most of a write's time, one BEGIN IMMEDIATE and
// one COMMIT (and a WAL append of the same pages) per write. So the writes
// that arrive while one transaction runs are committed together, in the
// next transaction: each in its own SAVEPOINT, so a write that fails (a
// conflict, a refused quota, any error of its function) rolls back only its
// own statements and gets its own error, while the others commit. The
// writes of a group run in arrival order and each sees the ones before it,
// as if they had been committed one after another. A write that finds the
// writer idle runs at once, alone: nothing waits for company.
//
// When the group as a whole fails (BEGIN, a SAVEPOINT, a ROLLBACK TO that
// SQLite refuses because it already rolled the transaction back, COMMIT),
// its writes are run again one at a time, each in its own transaction as
// before, so every write still gets an answer that is its own.

// maxGroup bounds the writes committed in one transaction.
const maxGroup = 64

// The states of a queued write.
const (
	queued    int32 = iota
	taken           // a leader runs it; its answer comes on done
	withdrawn       // its context ended first; nothing of it runs
)

// writeReq is one write waiting for the writer.
type writeReq struct {
	ctx   context.Context
	fn    func(t *sql.Tx, grouped bool) error
	state atomic.Int32
	err   error
	done  chan struct{}
}

// group is the writer's queue.
type group struct {
	mu      sync.Mutex
	queue   []*writeReq
	leading bool // a goroutine is running the queue
	// max bounds a group (0: maxGroup; 1 commits every write alone, as
	// the benchmark's baseline).
	max int
	// txs counts write transactions begun (tests: how many commits N
	// writes took).
	txs atomic.Uint64
}

// write runs fn in a write transaction, alone or with the writes that
// arrived while the previous transaction ran. fn's grouped is true when
// other writes share its transaction: its statements must then not be
// interrupted by its context (an interrupted statement can roll back the
// whole transaction); the context is checked before fn runs instead.
func (s *Store) write(ctx context.Context, fn func(t *sql.Tx, grouped bool) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &writeReq{ctx: ctx, fn: fn, done: make(chan struct{})}
	g := &s.g
	g.mu.Lock()
	g.queue = append(g.queue, r)
	lead := !g.leading
	g.leading = true
	g.mu.Unlock()
	if lead {
		s.lead()
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		if r.state.CompareAndSwap(queued, withdrawn) {
			return ctx.Err()
		}
		<-r.done // a leader took it: its answer is the truth
	}
	var p *fnPanic
	if errors.As(r.err, &p) {
		panic(p.v) // in the caller's goroutine, as without a group
	}
	return r.err
}

// fnPanic carries a write function's panic from the goroutine that ran it
// (another caller's, or a leader's) to its own caller.
type fnPanic struct{ v any }

func (p *fnPanic) Error() string { return fmt.Sprintf("write function panicked: %v", p.v) }

// call runs r's function, its panic turned into a *fnPanic.
func (r *writeReq) call(t *sql.Tx, grouped bool) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &fnPanic{v}
		}
	}()
	return r.fn(t, grouped)
}

// lead runs one group from the queue, then hands the queue to a new
// goroutine if more arrived meanwhile (so that a caller is not kept
// running other callers' writes), or marks it idle.
func (s *Store) lead() {
	g := &s.g
	g.mu.Lock()
	limit := g.max
	if limit <= 0 {
		limit = maxGroup
	}
	n := min(len(g.queue), limit)
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()
	s.runGroup(batch)
	g.mu.Lock()
	more := len(g.queue) > 0
	if !more {
		g.leading = false
		g.queue = nil
	}
	g.mu.Unlock()
	if more {
		go s.lead()
	}
}

// runGroup commits the writes of batch that are still wanted.
func (s *Store) runGroup(batch []*writeReq) {
	live := make([]*writeReq, 0, len(batch))
	for _, r := range batch {
		if r.state.CompareAndSwap(queued, taken) {
			live = append(live, r)
		}
	}
	if len(live) == 1 {
		r := live[0]
		r.err = s.writeAlone(r.ctx, func(t *sql.Tx) error { return r.call(t, false) })
		close(r.done)
		return
	}
	if len(live) == 0 {
		return
	}
	errs, err := s.writeGroup(live)
	for i, r := range live {
		if err != nil {
			// The group failed as a whole: each on its own, as before.
			r.err = s.writeAlone(r.ctx, func(t *sql.Tx) error { return r.call(t, false) })
		} else {
			r.err = errs[i]
		}
		close(r.done)
	}
}

// writeGroup runs the writes of live in one transaction, each in a
// savepoint, and returns each one's error; err is the group's own failure
// (nothing of it was committed then).
func (s *Store) writeGroup(live []*writeReq) (errs []error, err error) {
	// The transaction belongs to no one caller: one caller's context
	// ending must not end the others' writes.
	ctx := context.Background()
	errs = make([]error, len(live))
	var err2 error
	for attempt := range writeAttempts {
		if attempt > 0 {
			sleepBackoff(attempt)
		}
		err2 = s.writeGroupOnce(ctx, live, errs)
		if !isBusy(err2) {
			return errs, err2
		}
	}
	return nil, err2
}

func (s *Store) writeGroupOnce(ctx context.Context, live []*writeReq, errs []error) error {
	s.g.txs.Add(1)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	fail := func(err error) error { return errors.Join(err, ignoreDone(tx.Rollback())) }
	for i, r := range live {
		if err := r.ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		if _, err := tx.ExecContext(ctx, `SAVEPOINT w`); err != nil {
			return fail(fmt.Errorf("savepoint: %w", err))
		}
		ferr := r.call(tx, true)
		if isBusy(ferr) {
			// Retried as a group: the lock is the group's problem.
			return fail(ferr)
		}
		if ferr != nil {
			if _, err := tx.ExecContext(ctx, `ROLLBACK TO w`); err != nil {
				// SQLite rolled the whole transaction back (an I/O
				// error, a full disk): the group is lost.
				return fail(errors.Join(ferr, fmt.Errorf("rollback to savepoint: %w", err)))
			}
		}
		if _, err := tx.ExecContext(ctx, `RELEASE w`); err != nil {
			return fail(errors.Join(ferr, fmt.Errorf("release savepoint: %w", err)))
		}
		errs[i] = ferr
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
