package reconcile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// Several replicas reconcile the same sandboxes. Each pass over a sandbox
// runs under the lease "sandbox/<id>" (store.Leases), held by this process
// (Config.Replica) and renewed while the pass runs: a replica that finds
// the lease held by another skips the pass and looks again later. A pass
// whose lease is lost (not renewed in time, taken over by another replica
// after it expired) is canceled, and every node call and sandbox write it
// makes checks the lease right before acting (fence): a replica that was
// paused or partitioned past its lease cannot start, stop or write what
// the new holder now drives. The sandbox row's version check refuses a
// write made from a stale read in any case.
//
// A holder that died is not waited for until its lease expires where the
// store can tell that it is gone (presence.go): its lease is taken over at
// once, with a new token, as if it had expired.

// DefaultLeaseTTL is how long a pass's lease lasts without renewal.
const DefaultLeaseTTL = 15 * time.Second

// errLeaseLost is why a pass is canceled when its lease is lost.
var errLeaseLost = errors.New("this replica lost the sandbox's lease to another")

// NewReplicaID returns an identity for one process incarnation: its host
// name, process id and random bytes, so that a restarted process never
// inherits its predecessor's leases.
func NewReplicaID() string {
	host, _ := os.Hostname()
	if len(host) > 32 {
		host = host[:32]
	}
	b := make([]byte, 6)
	rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}

// leaseName is the lease a pass over sandbox id runs under.
func leaseName(id string) string { return "sandbox/" + id }

// claim is the lease of one running pass.
type claim struct {
	cancel context.CancelCauseFunc

	mu    sync.Mutex // guards lease
	lease store.Lease
}

type claimKey struct{}

func claimOf(ctx context.Context) *claim {
	c, _ := ctx.Value(claimKey{}).(*claim)
	return c
}

// claimed runs one pass over sandbox id under its lease. When another
// replica holds the lease the pass is skipped and requeued, unless that
// replica is gone and the lease is taken over from it.
func (r *Reconciler) claimed(ctx context.Context, id string) (time.Duration, error) {
	l, ok, err := r.claim(ctx, id)
	if err != nil {
		return time.Second, err
	}
	if !ok {
		return time.Second, nil // another replica is on it
	}
	pctx, cancel := context.WithCancelCause(ctx)
	c := &claim{cancel: cancel, lease: l}
	pctx = context.WithValue(pctx, claimKey{}, c)
	stop := make(chan struct{})
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		r.keepLease(pctx, c, stop)
	}()
	after, err := r.reconcile(pctx, id)
	close(stop)
	<-renewed
	lost := context.Cause(pctx)
	cancel(nil)
	if errors.Is(lost, errLeaseLost) {
		r.log.Warn("reconcile pass lost its lease", "sandbox", id, "err", lost)
		return time.Second, nil
	}
	// Released at once, so another replica need not wait for the expiry.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer rcancel()
	c.mu.Lock()
	l = c.lease
	c.mu.Unlock()
	if rerr := r.store.ReleaseLease(rctx, l); rerr != nil && !errdefs.IsConflict(rerr) {
		r.log.Warn("release sandbox lease", "sandbox", id, "err", rerr)
	}
	return after, err
}

// claim takes the lease of sandbox id, or takes it over from a replica that
// is gone; false: another replica holds it. The lease's Expires is this
// process's deadline, not the store's (see localExpiry).
func (r *Reconciler) claim(ctx context.Context, id string) (store.Lease, bool, error) {
	sent := time.Now()
	l, err := r.store.AcquireLease(ctx, leaseName(id), r.cfg.Replica, r.cfg.LeaseTTL)
	if errors.Is(err, errdefs.ErrConflict) {
		var ok bool
		if l, ok = r.takeOver(ctx, id, err); !ok {
			return store.Lease{}, false, nil
		}
		err = nil
	}
	if err != nil {
		return store.Lease{}, false, fmt.Errorf("sandbox %s: claim: %w", id, err)
	}
	l.Expires = r.localExpiry(sent)
	return l, true, nil
}

// localExpiry is when a lease granted (or renewed) for LeaseTTL by a request
// sent at sent expires, on this process's clock: the store measures Expires
// by its own wall clock, which may be ahead of ours or jump (F-8); the store
// granted the lease after sent, so sent + TTL is never later than the real
// expiry, and time.Time keeps the monotonic reading, so comparisons with it
// ignore steps of our wall clock too.
func (r *Reconciler) localExpiry(sent time.Time) time.Time {
	return sent.Add(r.cfg.LeaseTTL)
}

// keepLease renews c's lease every third of its TTL until stop closes; it
// cancels the pass when the lease is lost, or cannot be renewed before it
// expires.
func (r *Reconciler) keepLease(ctx context.Context, c *claim, stop <-chan struct{}) {
	t := time.NewTicker(r.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.renew(ctx, c); err != nil && ctx.Err() == nil {
				c.mu.Lock()
				expired := time.Now().After(c.lease.Expires)
				c.mu.Unlock()
				if expired {
					c.cancel(fmt.Errorf("%w: cannot renew it: %v", errLeaseLost, err))
					return
				}
			}
		}
	}
}

// renew extends c's lease; a lease another replica took cancels the pass.
func (r *Reconciler) renew(ctx context.Context, c *claim) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	sent := time.Now()
	l, err := r.store.RenewLease(ctx, c.lease, r.cfg.LeaseTTL)
	if errdefs.IsConflict(err) || errdefs.IsNotFound(err) {
		err = fmt.Errorf("%w: %w", errLeaseLost, err)
		c.cancel(err)
		return err
	}
	if err != nil {
		return err
	}
	c.lease = l
	c.lease.Expires = r.localExpiry(sent)
	return nil
}

// fence checks, right before the pass acts on a node or writes the
// sandbox, that it still holds its lease (renewing it). A pass run without
// a lease (tests drive reconcile directly) is not fenced.
func (r *Reconciler) fence(ctx context.Context) error {
	c := claimOf(ctx)
	if c == nil {
		return nil
	}
	err := r.renew(ctx, c)
	switch {
	case errors.Is(err, errLeaseLost):
		return fmt.Errorf("%w: fence: %w", errdefs.ErrConflict, err)
	case err != nil:
		// Not known to be lost, but not confirmed either: do not act now.
		return fmt.Errorf("%w: fence: confirm the sandbox's lease: %v", errdefs.ErrUnavailable, err)
	}
	return nil
}

// fencedNode is a NodeAPI whose every call is fenced by the pass's lease.
type fencedNode struct {
	r   *Reconciler
	api NodeAPI
}

func (f fencedNode) Start(ctx context.Context, req nodev1.StartExecution) (*nodev1.Execution, error) {
	if err := f.r.fence(ctx); err != nil {
		return nil, err
	}
	return f.api.Start(ctx, req)
}

func (f fencedNode) Stop(ctx context.Context, execID string) error {
	if err := f.r.fence(ctx); err != nil {
		return err
	}
	return f.api.Stop(ctx, execID)
}

func (f fencedNode) Pause(ctx context.Context, execID string) error {
	if err := f.r.fence(ctx); err != nil {
		return err
	}
	return f.api.Pause(ctx, execID)
}

func (f fencedNode) Resume(ctx context.Context, execID string) error {
	if err := f.r.fence(ctx); err != nil {
		return err
	}
	return f.api.Resume(ctx, execID)
}

func (f fencedNode) Snapshot(ctx context.Context, execID string, req nodev1.TakeSnapshot) (*nodev1.Snapshot, error) {
	if err := f.r.fence(ctx); err != nil {
		return nil, err
	}
	return f.api.Snapshot(ctx, execID, req)
}

func (f fencedNode) DeleteSnapshot(ctx context.Context, id string) error {
	if err := f.r.fence(ctx); err != nil {
		return err
	}
	return f.api.DeleteSnapshot(ctx, id)
}

func (f fencedNode) Upload(ctx context.Context, id string, req nodev1.UploadSnapshot) (*nodev1.Artifacts, error) {
	if err := f.r.fence(ctx); err != nil {
		return nil, err
	}
	return f.api.Upload(ctx, id, req)
}

func (f fencedNode) Download(ctx context.Context, id string, req nodev1.DownloadSnapshot) (*nodev1.Snapshot, error) {
	if err := f.r.fence(ctx); err != nil {
		return nil, err
	}
	return f.api.Download(ctx, id, req)
}

// UploadProgress forwards to the node's streamed upload (progressNode),
// or its plain one when it has none.
func (f fencedNode) UploadProgress(ctx context.Context, id string, req nodev1.UploadSnapshot, onProgress func(nodev1.Progress)) (*nodev1.Artifacts, error) {
	if err := f.r.fence(ctx); err != nil {
		return nil, err
	}
	if p, ok := f.api.(progressNode); ok {
		return p.UploadProgress(ctx, id, req, onProgress)
	}
	return f.api.Upload(ctx, id, req)
}

// DownloadProgress forwards to the node's streamed download
// (progressNode), or its plain one when it has none.
func (f fencedNode) DownloadProgress(ctx context.Context, id string, req nodev1.DownloadSnapshot, onProgress func(nodev1.Progress)) (*nodev1.Snapshot, error) {
	if err := f.r.fence(ctx); err != nil {
		return nil, err
	}
	if p, ok := f.api.(progressNode); ok {
		return p.DownloadProgress(ctx, id, req, onProgress)
	}
	return f.api.Download(ctx, id, req)
}

func (f fencedNode) EnsureTemplate(ctx context.Context, name, source string) (*nodev1.TemplateReady, error) {
	if err := f.r.fence(ctx); err != nil {
		return nil, err
	}
	return f.api.EnsureTemplate(ctx, name, source)
}

// ListSandbox forwards the node's optional listing of one sandbox's
// executions (see stopPrevious).
func (f fencedNode) ListSandbox(ctx context.Context, sandboxID string) ([]nodev1.Execution, error) {
	l, ok := f.api.(interface {
		ListSandbox(context.Context, string) ([]nodev1.Execution, error)
	})
	if !ok {
		return nil, fmt.Errorf("%w: the node client cannot list executions", errdefs.ErrFailedPrecondition)
	}
	return l.ListSandbox(ctx, sandboxID)
}
