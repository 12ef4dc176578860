package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// Snapshot names (E2B's named snapshots): a tenant names its snapshots and
// creates sandboxes from a name as from a template. A name is unique within
// the tenant and has a template name's shape; naming another snapshot
// moves it there. A name may not be a template's, so a create by name is
// never ambiguous.

// CheckSnapshotName refuses a name no snapshot may have: not a template
// name's shape, a snapshot id's shape, or an existing template's name
// (ErrConflict).
func (s *Sandboxes) CheckSnapshotName(ctx context.Context, name string) error {
	if err := sandbox.ValidateTemplateName(name); err != nil {
		return fmt.Errorf("snapshot name: %w", err)
	}
	if sandbox.ValidSnapshotID(name) {
		return fmt.Errorf("%w: snapshot name %q has the shape of a snapshot id; choose another", errdefs.ErrInvalidArgument, name)
	}
	if _, err := s.store.GetTemplate(ctx, name); err == nil {
		return fmt.Errorf("%w: snapshot name %q is a template's name; choose another, so that a create from it is not ambiguous", errdefs.ErrConflict, name)
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return nil
}

// NameSnapshot gives name to snapshot snapID of c's tenant.
func (s *Sandboxes) NameSnapshot(ctx context.Context, c Caller, snapID, name string) error {
	if err := s.CheckSnapshotName(ctx, name); err != nil {
		return err
	}
	if _, err := s.GetSnapshot(ctx, c, snapID); err != nil {
		return err
	}
	return s.store.SetSnapshotName(ctx, store.SnapshotName{Tenant: c.Tenant, Name: name, SnapshotID: snapID})
}

// SnapshotByName returns the snapshot of c's tenant that holds name.
func (s *Sandboxes) SnapshotByName(ctx context.Context, c Caller, name string) (store.Snapshot, error) {
	n, err := s.store.GetSnapshotName(ctx, c.Tenant, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return store.Snapshot{}, fmt.Errorf("%w: no snapshot is named %q", errdefs.ErrNotFound, Clip(name))
	}
	if err != nil {
		return store.Snapshot{}, err
	}
	return s.GetSnapshot(ctx, c, n.SnapshotID)
}

// SnapshotNames returns the names of c's tenant's snapshots, by snapshot
// id.
func (s *Sandboxes) SnapshotNames(ctx context.Context, c Caller) (map[string][]string, error) {
	names, err := s.store.ListSnapshotNames(ctx, c.Tenant)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]string, len(names))
	for _, n := range names {
		out[n.SnapshotID] = append(out[n.SnapshotID], n.Name)
	}
	return out, nil
}
