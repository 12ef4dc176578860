package e2bapi

import (
	"context"
	"errors"
	"slices"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// E2B's named snapshots on SPACE's snapshot names (service.NameSnapshot):
// createSnapshot({name}) names the snapshot it takes (the name moves from
// the tenant's snapshot that held it, as E2B assigns a new build to an
// existing snapshot template), listSnapshots({name}) lists the snapshot
// that holds it, and a create whose templateID is a name starts from that
// snapshot. The snapshotID stays SPACE's snapshot id (what
// deleteSnapshot takes); names lists the snapshot's names.

// e2bSnapshotFor resolves a create's templateID: a snapshot id, or a name
// of one of the caller's snapshots (ok), else a template (not ok).
func (a *API) e2bSnapshotFor(ctx context.Context, c service.Caller, templateID string) (string, bool, error) {
	if sandbox.ValidSnapshotID(templateID) {
		return templateID, true, nil
	}
	if sandbox.ValidateTemplateName(templateID) != nil {
		return "", false, nil // not a name either: the create says why
	}
	snap, err := a.svc.SnapshotByName(ctx, c, templateID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return snap.ID, true, nil
}

// e2bNameSnapshot gives name ("": none) to snap, which TakeSnapshot
// returned with err, and returns the names to answer. A snapshot still
// being taken is named too (err is passed on): the name finds it once it
// is ready.
func (a *API) e2bNameSnapshot(ctx context.Context, c service.Caller, snap store.Snapshot, name string, err error) ([]string, error) {
	if name == "" || (err != nil && !errors.Is(err, service.ErrStillWorking)) {
		return []string{}, err
	}
	if nerr := a.svc.NameSnapshot(ctx, c, snap.ID, name); nerr != nil {
		return nil, nerr
	}
	return []string{name}, err
}

// e2bNamed reports whether a snapshot with names passes listSnapshots'
// name filter ("": every snapshot).
func e2bNamed(names []string, filter string) bool {
	return filter == "" || slices.Contains(names, filter)
}

// e2bNames is a snapshot's names as E2B lists them: never null.
func e2bNames(names []string) []string {
	if names == nil {
		return []string{}
	}
	return names
}
