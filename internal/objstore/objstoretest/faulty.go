package objstoretest

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
)

// Faulty is an objstore.Store that forwards to another and fails on demand,
// for tests of what happens when object storage goes away: SetDown fails
// every call, FailAfter lets a number of object bytes through and then
// breaks the stream in flight. Failures are ErrUnavailable, like a real
// store's outage, and a Put broken mid-stream leaves no object (the inner
// store's atomicity). Faulty is safe for concurrent use.
type Faulty struct {
	inner objstore.Store

	mu     sync.Mutex // guards down and budget
	down   bool
	budget int64 // object bytes (Put and Get) still allowed through; -1 means no limit
}

var _ objstore.Store = (*Faulty)(nil)

// NewFaulty wraps s; it starts healthy.
func NewFaulty(s objstore.Store) *Faulty { return &Faulty{inner: s, budget: -1} }

// SetDown makes every call fail (down) or succeed again (up).
func (f *Faulty) SetDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// FailAfter lets n more bytes of object data through, counted over all Put
// and Get streams together; the byte after them fails its stream and the
// store goes down until Reset or SetDown(false). An object that fits in the
// budget is stored whole.
func (f *Faulty) FailAfter(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.budget = n
}

// Reset brings the store up with no byte limit.
func (f *Faulty) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down, f.budget = false, -1
}

// Down reports whether calls currently fail.
func (f *Faulty) Down() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down
}

func (f *Faulty) check(op, key string) error {
	if f.Down() {
		return fmt.Errorf("objstoretest: %s %s: injected outage: %w", op, key, errdefs.ErrUnavailable)
	}
	return nil
}

// take claims up to want bytes of the budget and returns how many it got;
// got < want means the budget ran out and the store is now down.
func (f *Faulty) take(want int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return 0, fmt.Errorf("objstoretest: injected outage mid-stream: %w", errdefs.ErrUnavailable)
	}
	if f.budget < 0 || int64(want) <= f.budget {
		if f.budget >= 0 {
			f.budget -= int64(want)
		}
		return want, nil
	}
	got := int(f.budget)
	f.budget = 0
	if got == 0 {
		f.down = true
		return 0, fmt.Errorf("objstoretest: injected outage after the byte budget: %w", errdefs.ErrUnavailable)
	}
	return got, nil
}

// faultyReader charges every byte it passes on to the budget.
type faultyReader struct {
	f *Faulty
	r io.Reader
}

func (fr *faultyReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := fr.r.Read(p)
	if n == 0 {
		return 0, err
	}
	got, terr := fr.f.take(n)
	if terr != nil {
		return 0, terr
	}
	if got < n {
		// The rest of this read is past the budget: hand over what fits;
		// the next Read fails.
		return got, nil
	}
	return n, err
}

type faultyReadCloser struct {
	faultyReader
	c io.Closer
}

func (r *faultyReadCloser) Close() error { return r.c.Close() }

// Put forwards to the inner store through the byte budget.
func (f *Faulty) Put(ctx context.Context, key string, r io.Reader, size int64) (objstore.Info, error) {
	if err := f.check("put", key); err != nil {
		return objstore.Info{}, err
	}
	return f.inner.Put(ctx, key, &faultyReader{f: f, r: r}, size)
}

// Get forwards to the inner store; the object's bytes pass the budget.
func (f *Faulty) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Info, error) {
	if err := f.check("get", key); err != nil {
		return nil, objstore.Info{}, err
	}
	rc, info, err := f.inner.Get(ctx, key)
	if err != nil {
		return nil, info, err
	}
	return &faultyReadCloser{faultyReader{f: f, r: rc}, rc}, info, nil
}

// GetRange forwards to the inner store; the bytes pass the budget.
func (f *Faulty) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, objstore.Info, error) {
	if err := f.check("get", key); err != nil {
		return nil, objstore.Info{}, err
	}
	rc, info, err := f.inner.GetRange(ctx, key, offset, length)
	if err != nil {
		return nil, info, err
	}
	return &faultyReadCloser{faultyReader{f: f, r: rc}, rc}, info, nil
}

// Stat forwards to the inner store.
func (f *Faulty) Stat(ctx context.Context, key string) (objstore.Info, error) {
	if err := f.check("stat", key); err != nil {
		return objstore.Info{}, err
	}
	return f.inner.Stat(ctx, key)
}

// Delete forwards to the inner store.
func (f *Faulty) Delete(ctx context.Context, key string) error {
	if err := f.check("delete", key); err != nil {
		return err
	}
	return f.inner.Delete(ctx, key)
}

// List forwards to the inner store.
func (f *Faulty) List(ctx context.Context, prefix string) ([]objstore.Info, error) {
	if err := f.check("list", prefix); err != nil {
		return nil, err
	}
	return f.inner.List(ctx, prefix)
}

// Close closes the inner store.
func (f *Faulty) Close() error { return f.inner.Close() }
