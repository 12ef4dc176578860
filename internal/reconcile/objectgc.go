package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// objectGCEvery is how often the whole object store is swept for objects no
// snapshot accounts for (collectAllObjects); a tenant's own objects are also
// swept each time one of its snapshots is deleted.
const objectGCEvery = 10 * time.Minute

// An object is written (Put) before the row that records it is committed:
// a node dies after k of n artifacts, a control plane after the parts but
// before the manifest, a hibernation is refused after its parts. The
// object-store garbage collector below deletes what no snapshot row
// accounts for:
//
//   - tenants/T/snapshots/ID/...: an object of a snapshot that has no row.
//     A hibernation creates its row before it uploads, and a snapshot's
//     objects are deleted before its row, so no upload under way and no
//     live snapshot ever lacks its row.
//   - tenants/T/shared/...: a content-addressed object (a base, an initrd)
//     that no snapshot row of T records, collected only while no upload of
//     T can be under way — no sandbox of T hibernating and no hibernate
//     snapshot of T without recorded artifacts, before and after the
//     listing and again right before each delete — since an upload reuses
//     (Stat) a shared object it finds before its row records it. What is
//     left is a hibernation that goes from its API request to the Stat of
//     the object between that last look and the delete (a pause, a
//     snapshot and an export at least): its verify fails and the
//     hibernation is refused (the sandbox stays paused, nothing lost), or
//     — only if the store applies the delete later than the hibernation
//     records its artifacts — the restore is refused for the missing
//     object.
//
// Nothing else under tenants/ (an unknown layout) is touched.

// sweepObjectsEvery sweeps at once, then every period, until ctx is done.
func (r *Reconciler) sweepObjectsEvery(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		r.sweepObjects(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sweepObjects is one pass of collectAllObjects, its outcome logged.
func (r *Reconciler) sweepObjects(ctx context.Context) {
	n, err := r.collectAllObjects(ctx)
	if err != nil && ctx.Err() == nil {
		r.log.Warn("object gc", "deleted", n, "err", err)
	} else if n > 0 {
		r.log.Info("object gc", "deleted", n)
	}
}

// collectTenantObjects is collectObjects after one of tenant's snapshots
// was deleted (the shared objects only it recorded are garbage now); a
// failure is logged, the next sweep retries.
func (r *Reconciler) collectTenantObjects(ctx context.Context, tenant string) {
	if _, err := r.collectObjects(ctx, tenant); err != nil && ctx.Err() == nil {
		r.log.Warn("object gc", "tenant", tenant, "err", err)
	}
}

// collectAllObjects sweeps every tenant's objects; it returns how many it
// deleted.
func (r *Reconciler) collectAllObjects(ctx context.Context) (int, error) {
	if r.cfg.Objects == nil {
		return 0, nil
	}
	infos, err := r.cfg.Objects.List(ctx, "tenants/")
	if err != nil {
		return 0, fmt.Errorf("object gc: list tenants/: %w", err)
	}
	tenants := map[string]bool{}
	for _, info := range infos {
		if t, _, ok := strings.Cut(strings.TrimPrefix(info.Key, "tenants/"), "/"); ok && t != "" {
			tenants[t] = true
		}
	}
	var n int
	var errs []error
	for t := range tenants {
		d, err := r.collectObjects(ctx, t)
		n += d
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// collectObjects deletes tenant's objects that no snapshot row accounts
// for (see above) and returns how many it deleted.
func (r *Reconciler) collectObjects(ctx context.Context, tenant string) (int, error) {
	if r.cfg.Objects == nil {
		return 0, nil
	}
	before, err := r.objectOwners(ctx, tenant)
	if err != nil {
		return 0, err
	}
	root := "tenants/" + tenant + "/"
	infos, err := r.cfg.Objects.List(ctx, root)
	if err != nil {
		return 0, fmt.Errorf("object gc: tenant %s: list: %w", tenant, err)
	}
	// Rows recorded while the store was listed count too.
	after, err := r.objectOwners(ctx, tenant)
	if err != nil {
		return 0, err
	}
	uploading := before.uploading || after.uploading
	var n int
	var errs []error
	for _, info := range infos {
		rest, ok := strings.CutPrefix(info.Key, root)
		if !ok {
			continue // a store whose listing is looser than its prefix
		}
		var orphan bool
		switch {
		case strings.HasPrefix(rest, "snapshots/"):
			id, _, _ := strings.Cut(strings.TrimPrefix(rest, "snapshots/"), "/")
			orphan = id != "" && !after.snapshots[id]
		case strings.HasPrefix(rest, "shared/"):
			orphan = !uploading && !after.keys[info.Key]
			if orphan {
				// Looked at again right before the delete: an upload
				// that began since (its sandbox hibernating) may have
				// found this object and be about to record it.
				now, err := r.objectOwners(ctx, tenant)
				if err != nil {
					return n, err
				}
				uploading = now.uploading
				orphan = !uploading && !now.keys[info.Key]
			}
		}
		if !orphan {
			continue
		}
		if err := r.cfg.Objects.Delete(ctx, info.Key); err != nil {
			errs = append(errs, fmt.Errorf("object gc: delete %s: %w", info.Key, err))
			continue
		}
		n++
		r.log.Info("deleted an object no snapshot records", "key", info.Key)
	}
	return n, errors.Join(errs...)
}

// objectOwners is what a tenant's rows say of its objects.
type objectOwners struct {
	snapshots map[string]bool // ids of the tenant's snapshot rows
	keys      map[string]bool // object keys those rows record
	uploading bool            // an upload of the tenant may be under way
}

func (r *Reconciler) objectOwners(ctx context.Context, tenant string) (objectOwners, error) {
	o := objectOwners{snapshots: map[string]bool{}, keys: map[string]bool{}}
	snaps, err := r.store.ListSnapshots(ctx, store.SnapshotFilter{Tenant: tenant})
	if err != nil {
		return o, fmt.Errorf("object gc: tenant %s: snapshots: %w", tenant, err)
	}
	for _, s := range snaps {
		o.snapshots[s.ID] = true
		if s.Artifacts == "" {
			if s.Tier == "hibernate" && s.State != store.SnapshotFailed {
				o.uploading = true
			}
			continue
		}
		var arts nodev1.Artifacts
		if err := json.Unmarshal([]byte(s.Artifacts), &arts); err != nil {
			// What it records is unknown: keep every shared object.
			o.uploading = true
			continue
		}
		for _, obj := range arts.Objects {
			o.keys[obj.Key] = true
		}
	}
	sbs, err := r.store.ListSandboxes(ctx, store.SandboxFilter{Tenant: tenant})
	if err != nil {
		return o, fmt.Errorf("object gc: tenant %s: sandboxes: %w", tenant, err)
	}
	for _, sb := range sbs {
		if sb.State == sandbox.StateHibernating {
			o.uploading = true
		}
	}
	return o, nil
}
