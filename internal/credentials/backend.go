package credentials

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Backend stores credentials: a vault. Implementations validate what they
// store, return copies the caller owns (and should Zero when done), and are
// safe for concurrent use.
type Backend interface {
	// Put creates or replaces the credential with c.ID. It is
	// ErrInvalidArgument when c does not validate, ErrConflict when c.ID
	// exists under another scope (move a credential by deleting it first).
	Put(ctx context.Context, c Credential) error
	// Get returns the credential with id, or ErrNotFound.
	Get(ctx context.Context, id string) (*Credential, error)
	// Delete removes the credential with id, or returns ErrNotFound.
	Delete(ctx context.Context, id string) error
	// List returns the credentials whose scope equals s exactly (a tenant
	// scope lists only tenant-wide credentials), ordered by id.
	List(ctx context.Context, s Scope) ([]Credential, error)
}

// MemoryBackend is a Backend in memory, for tests and `space server --dev`
// runs that need no persistence. Its zero value is ready to use.
type MemoryBackend struct {
	mu    sync.Mutex // guards creds
	creds map[string]Credential
}

var _ Backend = (*MemoryBackend)(nil)

// Put implements Backend.
func (m *MemoryBackend) Put(_ context.Context, c Credential) error {
	if err := c.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.creds[c.ID]; ok {
		if old.Scope != c.Scope {
			return fmt.Errorf("credential %s exists in scope %s, not %s; delete it first: %w", c.ID, old.Scope, c.Scope, errdefs.ErrConflict)
		}
		old.Zero()
	}
	if m.creds == nil {
		m.creds = make(map[string]Credential)
	}
	m.creds[c.ID] = c.Clone()
	return nil
}

// Get implements Backend.
func (m *MemoryBackend) Get(_ context.Context, id string) (*Credential, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.creds[id]
	if !ok {
		return nil, fmt.Errorf("credential %.128s: %w", id, errdefs.ErrNotFound)
	}
	out := c.Clone()
	return &out, nil
}

// Delete implements Backend.
func (m *MemoryBackend) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.creds[id]
	if !ok {
		return fmt.Errorf("credential %.128s: %w", id, errdefs.ErrNotFound)
	}
	c.Zero()
	delete(m.creds, id)
	return nil
}

// List implements Backend.
func (m *MemoryBackend) List(_ context.Context, s Scope) ([]Credential, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Credential
	for _, c := range m.creds {
		if c.Scope == s {
			out = append(out, c.Clone())
		}
	}
	slices.SortFunc(out, func(a, b Credential) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
