package mcpserver

import (
	"sync"
	"time"
)

// binding is the key digest a session was opened with, and when it was
// last used.
type binding struct {
	digest [32]byte
	used   time.Time
}

// bindings remembers which key each HTTP session belongs to.
type bindings struct {
	mu   sync.Mutex
	keys map[string]binding
}

// The answers of bind.
const (
	bound    = iota // the session may be used with this key
	otherKey        // the session is another key's
	full            // a new session, and maxSessions are open
)

// bind says whether session sid may be used with the key of digest: it is
// bound to it already, or unknown and now bound to it. Active sessions are
// never forgotten to make room: a forgotten session id could be bound
// anew by whoever presents it.
func (b *bindings) bind(sid string, digest [32]byte) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if cur, ok := b.keys[sid]; ok {
		if cur.digest != digest {
			return otherKey
		}
		b.keys[sid] = binding{digest, now}
		return bound
	}
	if len(b.keys) >= maxSessions {
		// Those idle past sessionIdle the SDK has closed: their ids
		// open nothing any more.
		for old, cur := range b.keys {
			if now.Sub(cur.used) > sessionIdle {
				delete(b.keys, old)
			}
		}
		if len(b.keys) >= maxSessions {
			return full
		}
	}
	b.keys[sid] = binding{digest, now}
	return bound
}

// forget drops session sid.
func (b *bindings) forget(sid string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.keys, sid)
}
