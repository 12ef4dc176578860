// Package readcache keeps the two reads every client request makes — its API
// key (GetAPIKey) and its sandbox (GetSandbox) — in the server's memory, in
// front of a store only this process writes (SQLite).
//
// The cache never delays a change: every write of the Store contract that
// can change either answer (a key created or revoked, a tenant and its keys
// deleted, a sandbox created, updated — state, node, route, generation —
// or deleted) goes through this wrapper and drops the entries it touches
// before it returns, whether it succeeded or not. Since the wrapper is the
// store the whole process uses, no handler or reconciler can write around it;
// TestEveryMethodIsClassified fails when the contract grows a method nobody
// decided about.
//
// A read that raced a write cannot put the value it read before the write
// back after the write dropped it: each cache has a generation that every
// drop increments, and a read stores what it read only if the generation is
// the one it saw before asking the backend.
//
// Why SQLite only: with PostgreSQL another replica's revocation is a write
// this process never sees, and the revoking call would return while this
// replica still served the key. The server therefore wraps only the SQLite
// store (cmd/space openSQLite); PostgreSQL replicas read both rows as before.
//
// Entries are what the backend returns — an API key's hash, never its
// secret — and each cache holds at most the size given to New.
package readcache

import (
	"context"
	"sync"

	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// DefaultSize is the number of keys, and of sandboxes, the server keeps.
const DefaultSize = 8192

// Backend is what the wrapper needs of the store it fronts: the whole
// contract and the optional abilities the SQL stores have, which the wrapper
// passes on so that callers probing for them still find them.
type Backend interface {
	store.Store
	store.SandboxEvents
	store.ReplicaAddresses
}

// Store is a Backend whose GetAPIKey and GetSandbox answers are cached until
// a write through it changes them.
type Store struct {
	Backend
	max int

	mu sync.Mutex // guards everything below
	// keyGen and sandboxGen count the drops of each cache (see the package
	// comment).
	keyGen, sandboxGen uint64
	keys               map[string]store.APIKey
	sandboxes          map[string]*sandbox.Sandbox // by id; clones, never handed out
}

// New returns b behind caches of at most size keys and size sandboxes.
func New(b Backend, size int) *Store {
	if size < 1 {
		size = 1
	}
	return &Store{
		Backend:   b,
		max:       size,
		keys:      make(map[string]store.APIKey),
		sandboxes: make(map[string]*sandbox.Sandbox),
	}
}

// Len returns how many keys and sandboxes are cached.
func (s *Store) Len() (keys, sandboxes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys), len(s.sandboxes)
}

// GetAPIKey implements store.APIKeys from the cache, or reads the backend and
// keeps what it found. A missing key is not remembered.
func (s *Store) GetAPIKey(ctx context.Context, id string) (store.APIKey, error) {
	s.mu.Lock()
	k, ok := s.keys[id]
	gen := s.keyGen
	s.mu.Unlock()
	if ok {
		return k, nil
	}
	k, err := s.Backend.GetAPIKey(ctx, id)
	if err != nil {
		return k, err
	}
	s.mu.Lock()
	if s.keyGen == gen {
		if _, ok := s.keys[id]; !ok && len(s.keys) >= s.max {
			evictOne(s.keys)
		}
		s.keys[id] = k
	}
	s.mu.Unlock()
	return k, nil
}

// GetSandbox implements store.Sandboxes from the cache, or reads the backend
// and keeps what it found. The caller gets its own copy either way.
func (s *Store) GetSandbox(ctx context.Context, tenant, id string) (*sandbox.Sandbox, error) {
	s.mu.Lock()
	sb, ok := s.sandboxes[id]
	gen := s.sandboxGen
	s.mu.Unlock()
	if ok && sb.Tenant == tenant {
		return sb.Clone(), nil
	}
	// Another tenant's id goes to the backend, which answers ErrNotFound
	// exactly as it would have without the cache.
	sb, err := s.Backend.GetSandbox(ctx, tenant, id)
	if err != nil {
		return sb, err
	}
	keep := sb.Clone()
	s.mu.Lock()
	if s.sandboxGen == gen {
		if _, ok := s.sandboxes[id]; !ok && len(s.sandboxes) >= s.max {
			evictOne(s.sandboxes)
		}
		s.sandboxes[id] = keep
	}
	s.mu.Unlock()
	return sb, nil
}

// evictOne removes one entry of m, whichever the map's iteration gives first.
func evictOne[V any](m map[string]V) {
	for k := range m {
		delete(m, k)
		return
	}
}

// dropKey forgets key id; every write that may change it calls it after the
// backend returned.
func (s *Store) dropKey(id string) {
	s.mu.Lock()
	s.keyGen++
	delete(s.keys, id)
	s.mu.Unlock()
}

// dropSandbox forgets sandbox id.
func (s *Store) dropSandbox(id string) {
	s.mu.Lock()
	s.sandboxGen++
	delete(s.sandboxes, id)
	s.mu.Unlock()
}

// dropAll forgets every key and sandbox (a tenant's deletion: its keys go
// with it, whichever they are).
func (s *Store) dropAll() {
	s.mu.Lock()
	s.keyGen++
	s.sandboxGen++
	clear(s.keys)
	clear(s.sandboxes)
	s.mu.Unlock()
}
