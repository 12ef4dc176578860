package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/objstore"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// Object key layout of a tenant's data in the object store.
func snapshotPrefix(tenant, id string) string { return "tenants/" + tenant + "/snapshots/" + id + "/" }
func sharedPrefix(tenant string) string       { return "tenants/" + tenant + "/shared/" }

// hibernateSandbox moves a sandbox off its node into object storage:
// pause, full snapshot (disk for ns, which cannot save memory), upload of
// the encrypted artifacts, verification of every object, then the execution
// and the node-local snapshot are released. The snapshot is restorable only
// once every object has been verified (its row then records them). Each step
// is idempotent; a failure before the upload is complete leaves the sandbox
// paused on its node, with the reason in its events.
func (r *Reconciler) hibernateSandbox(ctx context.Context, sb *sandbox.Sandbox) (time.Duration, error) {
	if r.cfg.Objects == nil || r.cfg.TenantKey == nil {
		return r.refuseHibernate(ctx, sb, fmt.Errorf("%w: no object store is configured", errdefs.ErrFailedPrecondition))
	}
	kind := store.SnapshotDisk
	if sb.Runtime == "vm" {
		kind = store.SnapshotFull
	}
	snap, err := r.lifecycleSnapshot(ctx, sb, "hibernate", kind)
	if err != nil {
		return time.Second, err
	}
	api, err := r.node(sb.Node)
	if err != nil {
		return time.Second, err
	}
	if snap.State != store.SnapshotReady {
		// Nothing may change after the snapshot: pause first (a full
		// snapshot leaves the VM paused anyway).
		if err := api.Pause(ctx, sb.ExecID); err != nil && !errdefs.IsFailedPrecondition(err) {
			return r.retryOrRefuse(ctx, sb, "pause", err)
		}
		if err := r.takeSnapshot(ctx, sb, &snap, true); err != nil {
			return r.retryOrRefuse(ctx, sb, "snapshot", err)
		}
	}
	if snap.Artifacts == "" {
		keyID, err := r.cfg.TenantKey(ctx, sb.Tenant)
		if err != nil {
			return r.retryOrRefuse(ctx, sb, "tenant key", err)
		}
		// The sandbox shows it hibernating (the object GC keeps shared
		// objects while it does); a GC that looked before that must be
		// done deleting before the upload reuses any (objectgc.go).
		if err := r.waitOutObjectGC(ctx, sb.Tenant); err != nil {
			return time.Second, fmt.Errorf("sandbox %s: hibernate: %w", sb.ID, err)
		}
		arts, err := r.upload(ctx, api, sb.ID, snap.ID, nodev1.UploadSnapshot{
			Tenant: sb.Tenant, Prefix: snapshotPrefix(sb.Tenant, snap.ID), SharedPrefix: sharedPrefix(sb.Tenant), KeyID: keyID,
		})
		if err != nil {
			return r.retryOrRefuse(ctx, sb, "upload", err)
		}
		failpoint.HibernateAfterParts.Hit()
		for _, obj := range arts.Objects {
			if err := objstore.Verify(ctx, r.cfg.Objects, obj.Key, objstore.Info{Key: obj.Key, Size: obj.Size, Digest: obj.Digest}); err != nil {
				return r.retryOrRefuse(ctx, sb, "verify "+obj.Key, err)
			}
		}
		b, err := json.Marshal(arts)
		if err != nil {
			return time.Second, err
		}
		snap.Artifacts = string(b)
		if err := r.store.UpdateSnapshot(ctx, snap); err != nil {
			return time.Second, err
		}
		failpoint.HibernateAfterManifest.Hit()
		r.event(ctx, sb.ID, "snapshot", fmt.Sprintf("snapshot %s uploaded: %d objects, %d bytes of artifacts, %d bytes written",
			snap.ID, len(arts.Objects), arts.PlainBytes, arts.StoredBytes))
	}
	if err := api.Stop(ctx, sb.ExecID); err != nil {
		return time.Second, fmt.Errorf("sandbox %s: stop %s: %w", sb.ID, sb.ExecID, err)
	}
	failpoint.HibernateAfterStop.Hit()
	if snap.Node != "" {
		if err := api.DeleteSnapshot(ctx, snap.ID); err != nil {
			return time.Second, err
		}
		failpoint.HibernateAfterLocalDelete.Hit()
		snap.Node = ""
		if err := r.store.UpdateSnapshot(ctx, snap); err != nil {
			return time.Second, err
		}
	}
	failpoint.HibernateBeforeCommit.Hit()
	from := sb.Node
	sb.StartFrom, sb.Node = snap.ID, ""
	sb.State = sandbox.Settled(sb.State)
	after, err := r.update(ctx, sb)
	if err == nil && after == 0 {
		r.event(ctx, sb.ID, "state", fmt.Sprintf("hibernated: snapshot %s in object storage; %s released", snap.ID, from))
	}
	return after, err
}

// retryOrRefuse retries a hibernate step that failed for a passing reason;
// otherwise (or after the start timeout) the hibernation is given up and
// the sandbox stays paused on its node.
func (r *Reconciler) retryOrRefuse(ctx context.Context, sb *sandbox.Sandbox, step string, err error) (time.Duration, error) {
	if errdefs.IsUnavailable(err) && time.Since(sb.UpdatedAt) < r.cfg.UploadRetry && ctx.Err() == nil {
		return 2 * time.Second, fmt.Errorf("sandbox %s: hibernate: %s: %w", sb.ID, step, err)
	}
	return r.refuseHibernate(ctx, sb, fmt.Errorf("%s: %w", step, err))
}

// refuseHibernate gives a hibernation up: the sandbox stays paused on its
// node (its memory and disk intact), the reason in its record and events.
func (r *Reconciler) refuseHibernate(ctx context.Context, sb *sandbox.Sandbox, err error) (time.Duration, error) {
	if api, aerr := r.node(sb.Node); aerr == nil {
		if perr := api.Pause(ctx, sb.ExecID); perr != nil && !errdefs.IsFailedPrecondition(perr) {
			r.log.Warn("pause after a failed hibernation", "sandbox", sb.ID, "err", perr)
		}
	}
	// The sandbox may be resumed and change: a later hibernation of this
	// generation must take a snapshot of its own, not reuse this one.
	id := sandbox.LifecycleSnapshotID(sb.ID, "hibernate", sb.Generation)
	if snap, gerr := r.store.GetSnapshot(ctx, "", id); gerr == nil {
		if derr := r.dropSnapshot(ctx, snap); derr != nil {
			r.log.Warn("remove the snapshot of a refused hibernation", "snapshot", id, "err", derr)
		}
	}
	reason := "hibernate failed: " + err.Error()
	sb.State, sb.Desired, sb.Reason = sandbox.StatePaused, sandbox.StatePaused, reason
	r.event(ctx, sb.ID, "refused", reason+"; the sandbox stays paused on "+sb.Node)
	return r.update(ctx, sb)
}

// ensureLocal makes the snapshot a restoring sandbox starts from present on
// its node, downloading it from object storage when it is elsewhere. ok is
// false when the step is finished for this pass (the caller returns after,
// err).
func (r *Reconciler) ensureLocal(ctx context.Context, sb *sandbox.Sandbox, api NodeAPI) (after time.Duration, err error, ok bool) {
	snap, err := r.store.GetSnapshot(ctx, "", sb.StartFrom)
	if err != nil {
		if errdefs.IsNotFound(err) {
			after, err = r.failSandbox(ctx, sb, fmt.Sprintf("snapshot %s to start from is gone", sb.StartFrom))
			return after, err, false
		}
		return time.Second, err, false
	}
	if snap.Node == sb.Node {
		return 0, nil, true
	}
	if snap.Artifacts == "" {
		after, err = r.failSandbox(ctx, sb, fmt.Sprintf("snapshot %s is on node %s and not in object storage", snap.ID, snap.Node))
		return after, err, false
	}
	var arts nodev1.Artifacts
	if err := json.Unmarshal([]byte(snap.Artifacts), &arts); err != nil {
		after, err = r.failSandbox(ctx, sb, fmt.Sprintf("snapshot %s: artifact record: %v", snap.ID, err))
		return after, err, false
	}
	dctx, cancel := context.WithTimeout(ctx, r.cfg.StartTimeout)
	// The node needs the sandbox's template too: later snapshots there are
	// deltas against it.
	if tpl, terr := r.store.GetTemplate(ctx, sb.Template); terr == nil {
		if _, terr := api.EnsureTemplate(dctx, tpl.Name, tpl.Source); terr != nil {
			r.log.Warn("template on the restoring node", "sandbox", sb.ID, "node", sb.Node, "template", tpl.Name, "err", terr)
		}
	}
	_, err = r.download(dctx, api, sb.ID, snap.ID, nodev1.DownloadSnapshot{Tenant: sb.Tenant, Artifacts: arts})
	cancel()
	if err != nil {
		if errdefs.IsUnavailable(err) && time.Since(sb.UpdatedAt) < r.cfg.StartTimeout && ctx.Err() == nil {
			return 2 * time.Second, err, false
		}
		after, err = r.refuseRestore(ctx, sb, &snap, err)
		return after, err, false
	}
	failpoint.RestoreAfterDownload.Hit()
	if _, lost := r.lostNode(ctx, snap.Node); !lost && snap.Node != "" {
		// The row names one node: the copy on the other one goes (else
		// nothing would ever remove it). A lost node's copy stays.
		if oldAPI, oerr := r.node(snap.Node); oerr == nil {
			if derr := oldAPI.DeleteSnapshot(ctx, snap.ID); derr != nil {
				r.log.Warn("remove the snapshot's copy on its previous node", "snapshot", snap.ID, "node", snap.Node, "err", derr)
			}
		}
	}
	snap.Node = sb.Node
	if err := r.store.UpdateSnapshot(ctx, snap); err != nil {
		return time.Second, err, false
	}
	r.event(ctx, sb.ID, "snapshot", fmt.Sprintf("snapshot %s downloaded to %s", snap.ID, sb.Node))
	return 0, nil, true
}

// refuseRestore gives up a restore whose snapshot cannot be brought to the
// node (revoked key, missing or tampered object): a hibernated sandbox stays
// hibernated, its data untouched, with the reason; others fail.
func (r *Reconciler) refuseRestore(ctx context.Context, sb *sandbox.Sandbox, snap *store.Snapshot, err error) (time.Duration, error) {
	reason := fmt.Sprintf("restore refused: snapshot %s: %v", snap.ID, err)
	if snap.Tier != "hibernate" || snap.Node != "" {
		return r.failSandbox(ctx, sb, reason)
	}
	sb.State, sb.Desired, sb.Node, sb.Reason = sandbox.StateHibernated, sandbox.StateHibernated, "", reason
	r.event(ctx, sb.ID, "refused", reason)
	return r.update(ctx, sb)
}

// deleteObjects removes a snapshot's own objects (not the shared ones), each
// by its key: the ones its row records, then any other the store lists
// under its prefix (an upload that was refused after it stored objects left
// them unrecorded). A key the listing answers that is not under the
// snapshot's own prefix is never deleted: a store that lies, or one whose
// prefix match is looser than S3's, must not make this delete another
// snapshot's objects; and a truncated listing cannot leave a recorded
// object behind.
func (r *Reconciler) deleteObjects(ctx context.Context, snap store.Snapshot) error {
	if r.cfg.Objects == nil {
		return nil
	}
	prefix := snapshotPrefix(snap.Tenant, snap.ID)
	own := func(key string) bool { return strings.HasPrefix(key, prefix) && len(key) > len(prefix) }
	var keys []string
	if snap.Artifacts != "" {
		var arts nodev1.Artifacts
		if err := json.Unmarshal([]byte(snap.Artifacts), &arts); err != nil {
			// The listing below still finds what is under the prefix.
			r.log.Warn("the snapshot's recorded artifacts do not decode; deleting what the store lists", "snapshot", snap.ID, "err", err)
		}
		for _, obj := range arts.Objects {
			if own(obj.Key) { // the shared ones stay
				keys = append(keys, obj.Key)
			}
		}
	}
	infos, lerr := r.cfg.Objects.List(ctx, prefix)
	if lerr != nil {
		lerr = fmt.Errorf("snapshot %s: list objects: %w", snap.ID, lerr)
	}
	for _, info := range infos {
		if !own(info.Key) {
			r.log.Warn("the object store listed a key outside the snapshot's prefix; not deleting it",
				"snapshot", snap.ID, "prefix", prefix, "key", info.Key)
			continue
		}
		if !slices.Contains(keys, info.Key) {
			keys = append(keys, info.Key)
		}
	}
	errs := []error{lerr}
	for _, key := range keys {
		if err := r.cfg.Objects.Delete(ctx, key); err != nil {
			errs = append(errs, fmt.Errorf("snapshot %s: delete object %s: %w", snap.ID, key, err))
		}
	}
	return errors.Join(errs...)
}

// dropSnapshot removes a snapshot everywhere: its node's copy, its own
// objects and its row.
func (r *Reconciler) dropSnapshot(ctx context.Context, snap store.Snapshot) error {
	if snap.Node != "" {
		api, err := r.node(snap.Node)
		if err != nil {
			return err
		}
		if err := api.DeleteSnapshot(ctx, snap.ID); err != nil {
			return err
		}
	}
	if err := r.deleteObjects(ctx, snap); err != nil {
		return err
	}
	if err := r.store.DeleteSnapshot(ctx, snap.ID); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	r.collectTenantObjects(ctx, snap.Tenant)
	return nil
}
