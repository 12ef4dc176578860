package readcache

import (
	"context"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// The writes below are every method of the Store contract (and of the
// optional abilities Backend passes on) that can change what GetAPIKey or
// GetSandbox answers. Each calls the backend, then drops what it may have
// changed, error or not: a write that failed on its way back (a cancelled
// context after the commit) may still have happened.

// CreateAPIKey implements store.APIKeys.
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	defer s.dropKey(k.ID)
	return s.Backend.CreateAPIKey(ctx, k)
}

// RevokeAPIKey implements store.APIKeys; the next GetAPIKey reads the row.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, at time.Time) error {
	defer s.dropKey(id)
	return s.Backend.RevokeAPIKey(ctx, id, at)
}

// DeleteTenant implements store.Tenants; the tenant's keys go with it.
func (s *Store) DeleteTenant(ctx context.Context, id string) error {
	defer s.dropAll()
	return s.Backend.DeleteTenant(ctx, id)
}

// CreateSandbox implements store.Sandboxes.
func (s *Store) CreateSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	defer s.dropSandbox(sb.ID)
	return s.Backend.CreateSandbox(ctx, sb)
}

// CreateSandboxWithinQuota implements store.Sandboxes.
func (s *Store) CreateSandboxWithinQuota(ctx context.Context, sb *sandbox.Sandbox) error {
	defer s.dropSandbox(sb.ID)
	return s.Backend.CreateSandboxWithinQuota(ctx, sb)
}

// CreateSandboxWithinQuotaAndEvents implements store.SandboxEvents.
func (s *Store) CreateSandboxWithinQuotaAndEvents(ctx context.Context, sb *sandbox.Sandbox, events []store.Event) error {
	defer s.dropSandbox(sb.ID)
	return s.Backend.CreateSandboxWithinQuotaAndEvents(ctx, sb, events)
}

// UpdateSandbox implements store.Sandboxes.
func (s *Store) UpdateSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	defer s.dropSandbox(sb.ID)
	return s.Backend.UpdateSandbox(ctx, sb)
}

// UpdateSandboxWithinQuota implements store.Sandboxes.
func (s *Store) UpdateSandboxWithinQuota(ctx context.Context, sb *sandbox.Sandbox) error {
	defer s.dropSandbox(sb.ID)
	return s.Backend.UpdateSandboxWithinQuota(ctx, sb)
}

// UpdateSandboxAndEvents implements store.SandboxEvents.
func (s *Store) UpdateSandboxAndEvents(ctx context.Context, sb *sandbox.Sandbox, events []store.Event) error {
	defer s.dropSandbox(sb.ID)
	return s.Backend.UpdateSandboxAndEvents(ctx, sb, events)
}

// DeleteSandbox implements store.Sandboxes.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	defer s.dropSandbox(id)
	return s.Backend.DeleteSandbox(ctx, id)
}
