package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
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
//     snapshot and an export at least) is held off by a lease: the GC
//     holds objectGCLease(T) from before that last look until after the
//     delete, and a hibernation takes (and gives back) the same lease
//     after its sandbox shows it hibernating and before its upload looks
//     at any shared object. Whichever comes second sees the other: a
//     hibernation that got the lease started its upload after the GC's
//     deletes (it finds them gone and uploads again), and a GC that got
//     it looks after the hibernation was visible (it deletes nothing
//     shared); a hibernation that finds the lease held waits and tries
//     again. The lease is renewed before each delete, so a GC that
//     stalled past its TTL and lost the lease deletes nothing more.
//
// Nothing else under tenants/ (an unknown layout) is touched.

// objectGCLease is the lease a tenant's shared-object deletes run under,
// and which a hibernation of the tenant takes once before its upload.
func objectGCLease(tenant string) string { return "objectgc/" + tenant }

// objectGCLeaseTTL bounds how long a GC that died holds off the tenant's
// hibernations; a live one renews it before each delete.
const objectGCLeaseTTL = time.Minute

// objectGCPasses numbers the GC's passes: each holds the lease under a
// name of its own, so two passes over one tenant (a sweep, a snapshot's
// delete) exclude each other too.
var objectGCPasses atomic.Uint64

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
	var lease *store.Lease
	defer func() {
		if lease != nil {
			if err := r.store.ReleaseLease(context.WithoutCancel(ctx), *lease); err != nil {
				r.log.Warn("object gc: release the lease", "tenant", tenant, "err", err)
			}
		}
	}()
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
				// Held from before the last look until after the
				// delete: no hibernation of the tenant starts its
				// upload in between.
				l, err := r.holdObjectGCLease(ctx, tenant, lease)
				if err != nil {
					if errdefs.IsConflict(err) {
						// A hibernation is starting its upload, or
						// another replica collects: not now.
						r.log.Info("object gc: shared objects left for the next sweep", "tenant", tenant, "reason", err)
						uploading, lease = true, nil
						continue
					}
					return n, err
				}
				lease = &l
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

// holdObjectGCLease takes the tenant's object GC lease, or renews held
// when the GC holds it already. ErrConflict: another holder has it.
func (r *Reconciler) holdObjectGCLease(ctx context.Context, tenant string, held *store.Lease) (store.Lease, error) {
	if held != nil {
		l, err := r.store.RenewLease(ctx, *held, objectGCLeaseTTL)
		if err != nil {
			return l, fmt.Errorf("object gc: tenant %s: renew the lease: %w", tenant, err)
		}
		return l, nil
	}
	holder := fmt.Sprintf("%s/objectgc/%d", r.cfg.Replica, objectGCPasses.Add(1))
	l, err := r.store.AcquireLease(ctx, objectGCLease(tenant), holder, objectGCLeaseTTL)
	if err != nil {
		return l, fmt.Errorf("object gc: tenant %s: lease: %w", tenant, err)
	}
	return l, nil
}

// waitOutObjectGC is a hibernation's turn at the tenant's object GC lease,
// taken and given back before its upload looks at any shared object (see
// the comment above sweepObjectsEvery): Unavailable while a GC holds it.
func (r *Reconciler) waitOutObjectGC(ctx context.Context, tenant string) error {
	l, err := r.store.AcquireLease(ctx, objectGCLease(tenant), r.cfg.Replica+"/hibernate", objectGCLeaseTTL)
	if errdefs.IsConflict(err) {
		return fmt.Errorf("%w: the object store's garbage collector is deleting tenant %s's unrecorded shared objects; the upload waits for it: %v",
			errdefs.ErrUnavailable, tenant, err)
	}
	if err != nil {
		return fmt.Errorf("object gc lease: %w", err)
	}
	if err := r.store.ReleaseLease(ctx, l); err != nil {
		// It lapses after its TTL: the GC waits until then.
		r.log.Warn("hibernate: give the object gc lease back", "tenant", tenant, "err", err)
	}
	return nil
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
