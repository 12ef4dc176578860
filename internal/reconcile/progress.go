package reconcile

import (
	"context"
	"encoding/json"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/progress"
	"github.com/spacesandbox/space/internal/store"
)

// progressNode is a node that streams readings of a snapshot's upload and
// download (nodeclient does); the reconciler turns them into "progress"
// events of the sandbox.
type progressNode interface {
	UploadProgress(ctx context.Context, id string, req nodev1.UploadSnapshot, onProgress func(nodev1.Progress)) (*nodev1.Artifacts, error)
	DownloadProgress(ctx context.Context, id string, req nodev1.DownloadSnapshot, onProgress func(nodev1.Progress)) (*nodev1.Snapshot, error)
}

// upload stores snapshot id's artifacts, with progress events of sandbox
// sandboxID when the node streams readings.
func (r *Reconciler) upload(ctx context.Context, api NodeAPI, sandboxID, id string, req nodev1.UploadSnapshot) (*nodev1.Artifacts, error) {
	if p, ok := api.(progressNode); ok {
		return p.UploadProgress(ctx, id, req, r.progressEvents(ctx, sandboxID))
	}
	return api.Upload(ctx, id, req)
}

// download brings snapshot id to the node, with progress events of sandbox
// sandboxID when the node streams readings.
func (r *Reconciler) download(ctx context.Context, api NodeAPI, sandboxID, id string, req nodev1.DownloadSnapshot) (*nodev1.Snapshot, error) {
	if p, ok := api.(progressNode); ok {
		return p.DownloadProgress(ctx, id, req, r.progressEvents(ctx, sandboxID))
	}
	return api.Download(ctx, id, req)
}

// progressEvents records a node's readings as "progress" events of sandbox
// id: the first, then at most one per ProgressEvery, and the last.
func (r *Reconciler) progressEvents(ctx context.Context, id string) func(nodev1.Progress) {
	limit := progress.Limiter{Throttle: progress.Throttle{Every: r.cfg.ProgressEvery}}
	return func(p nodev1.Progress) {
		rep := progress.Report(p)
		if !limit.Allow(rep) {
			return
		}
		b, err := json.Marshal(rep)
		if err != nil {
			return
		}
		e := store.Event{SandboxID: id, Time: time.Now().UTC(), Type: "progress", Message: rep.String(), Progress: string(b)}
		if _, err := r.store.AppendEvent(context.WithoutCancel(ctx), e); err != nil {
			r.log.Warn("append progress event", "sandbox", id, "err", err)
		}
	}
}
