// Package keylock provides mutual exclusion per key: operations on one key
// run one at a time, operations on different keys run in parallel, and a
// key's lock exists only while someone holds or waits for it.
package keylock

import "sync"

// Map is a set of locks by key. The zero value is ready to use.
type Map struct {
	mu    sync.Mutex // guards locks
	locks map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int // holders and waiters
}

// Lock locks key, waiting while another holds it, and returns the unlock.
func (m *Map) Lock(key string) (unlock func()) {
	m.mu.Lock()
	if m.locks == nil {
		m.locks = map[string]*keyLock{}
	}
	l := m.locks[key]
	if l == nil {
		l = &keyLock{}
		m.locks[key] = l
	}
	l.refs++
	m.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		m.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(m.locks, key)
		}
		m.mu.Unlock()
	}
}

// Len reports how many keys are locked or waited for (for tests).
func (m *Map) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.locks)
}
