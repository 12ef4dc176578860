// Package keylock provides mutual exclusion per key: operations on one key
// run one at a time, operations on different keys run in parallel, and a
// key's lock exists only while someone holds or waits for it.
package keylock

import (
	"context"
	"sync"
)

// Map is a set of locks by key. The zero value is ready to use.
type Map struct {
	mu    sync.Mutex // guards locks
	locks map[string]*keyLock
}

type keyLock struct {
	sem  chan struct{} // holds a value while the key is locked
	refs int           // holders and waiters; the entry goes at zero
}

// Lock locks key, waiting while another holds it, and returns the unlock.
func (m *Map) Lock(key string) (unlock func()) {
	unlock, _ = m.LockContext(context.Background(), key)
	return unlock
}

// LockContext locks key, waiting at most until ctx is done, and returns the
// unlock. A waiter whose ctx ends gets ctx's error and holds nothing.
func (m *Map) LockContext(ctx context.Context, key string) (unlock func(), err error) {
	l := m.ref(key)
	select {
	case l.sem <- struct{}{}:
		return func() { <-l.sem; m.unref(key, l) }, nil
	case <-ctx.Done():
		m.unref(key, l)
		return nil, ctx.Err()
	}
}

// ref returns key's entry, made if missing, counting the caller in.
func (m *Map) ref(key string) *keyLock {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks == nil {
		m.locks = map[string]*keyLock{}
	}
	l := m.locks[key]
	if l == nil {
		l = &keyLock{sem: make(chan struct{}, 1)}
		m.locks[key] = l
	}
	l.refs++
	return l
}

// unref counts a holder or waiter of key out, dropping the entry at zero.
func (m *Map) unref(key string, l *keyLock) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l.refs--; l.refs == 0 {
		delete(m.locks, key)
	}
}

// Len reports how many keys are locked or waited for (for tests).
func (m *Map) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.locks)
}
