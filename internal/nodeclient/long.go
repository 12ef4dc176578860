package nodeclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/internal/errdefs"
)

// streamIdle is how long a streamed answer may go without a message: the
// plain client's whole timeout (a variable for tests).
var streamIdle = 10 * time.Minute

// EnsureTemplate makes a template present on the node, building it when
// absent, and returns its size there.
func (c *Client) EnsureTemplate(ctx context.Context, name, source string) (*nodev1.TemplateReady, error) {
	return c.ensureTemplate(ctx, name, source, nil)
}

// EnsureTemplateProgress is EnsureTemplate with the build's readings:
// onProgress receives them while it runs.
func (c *Client) EnsureTemplateProgress(ctx context.Context, name, source string, onProgress func(nodev1.Progress)) (*nodev1.TemplateReady, error) {
	if onProgress == nil {
		onProgress = func(nodev1.Progress) {}
	}
	return c.ensureTemplate(ctx, name, source, onProgress)
}

func (c *Client) ensureTemplate(ctx context.Context, name, source string, onProgress func(nodev1.Progress)) (*nodev1.TemplateReady, error) {
	var out *nodev1.TemplateReady
	err := long(ctx, c, "EnsureTemplate", func(ctx context.Context) (*connect.ServerStreamForClient[nodeapiv1.EnsureTemplateResponse], error) {
		return c.longTemplates.Ensure(ctx, connect.NewRequest(&nodeapiv1.EnsureTemplateRequest{Name: name, Source: source, Progress: onProgress != nil}))
	}, func(m *nodeapiv1.EnsureTemplateResponse) *nodeapiv1.Progress {
		if r := m.GetReady(); r != nil {
			t := nodev1.TemplateReadyFromWire(r)
			out = &t
		}
		return m.GetProgress()
	}, onProgress)
	return finish(out, err)
}

// Upload stores a snapshot's artifacts in object storage.
func (c *Client) Upload(ctx context.Context, id string, req nodev1.UploadSnapshot) (*nodev1.Artifacts, error) {
	return c.UploadProgress(ctx, id, req, nil)
}

// UploadProgress is Upload with readings of the bytes sent while it runs.
func (c *Client) UploadProgress(ctx context.Context, id string, req nodev1.UploadSnapshot, onProgress func(nodev1.Progress)) (*nodev1.Artifacts, error) {
	var out *nodev1.Artifacts
	err := long(ctx, c, "UploadSnapshot", func(ctx context.Context) (*connect.ServerStreamForClient[nodeapiv1.UploadSnapshotResponse], error) {
		return c.longSnapshots.Upload(ctx, connect.NewRequest(&nodeapiv1.UploadSnapshotRequest{
			SnapshotId: id, Tenant: req.Tenant, Prefix: req.Prefix, SharedPrefix: req.SharedPrefix, KeyId: req.KeyID,
		}))
	}, func(m *nodeapiv1.UploadSnapshotResponse) *nodeapiv1.Progress {
		if a := m.GetArtifacts(); a != nil {
			arts := nodev1.ArtifactsFromWire(a)
			out = &arts
		}
		return m.GetProgress()
	}, onProgress)
	return finish(out, err)
}

// Download rebuilds a snapshot on the node from object storage.
func (c *Client) Download(ctx context.Context, id string, req nodev1.DownloadSnapshot) (*nodev1.Snapshot, error) {
	return c.DownloadProgress(ctx, id, req, nil)
}

// DownloadProgress is Download with readings of the bytes received while
// it runs.
func (c *Client) DownloadProgress(ctx context.Context, id string, req nodev1.DownloadSnapshot, onProgress func(nodev1.Progress)) (*nodev1.Snapshot, error) {
	var out *nodev1.Snapshot
	err := long(ctx, c, "DownloadSnapshot", func(ctx context.Context) (*connect.ServerStreamForClient[nodeapiv1.DownloadSnapshotResponse], error) {
		return c.longSnapshots.Download(ctx, connect.NewRequest(&nodeapiv1.DownloadSnapshotRequest{
			SnapshotId: id, Tenant: req.Tenant, Artifacts: req.Artifacts.ToWire(),
		}))
	}, func(m *nodeapiv1.DownloadSnapshotResponse) *nodeapiv1.Progress {
		if s := m.GetSnapshot(); s != nil {
			snap := nodev1.SnapshotFromWire(s)
			out = &snap
		}
		return m.GetProgress()
	}, onProgress)
	return finish(out, err)
}

// long runs one streamed call: open starts it, take reads each message
// (keeping the result, returning the reading it carries, if any), and
// onProgress (nil: dropped) receives the readings. The call may outlast the
// plain client's timeout while readings show it alive; a node silent for
// streamIdle is given up, as Unavailable.
func long[T any](ctx context.Context, c *Client, procedure string,
	open func(context.Context) (*connect.ServerStreamForClient[T], error),
	take func(*T) *nodeapiv1.Progress, onProgress func(nodev1.Progress)) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := time.AfterFunc(streamIdle, func() {
		cancel(fmt.Errorf("%w: node %s %s: no answer or reading for %v", errdefs.ErrUnavailable, c.addr, procedure, streamIdle))
	})
	defer idle.Stop()
	st, err := open(ctx)
	if err != nil {
		return c.streamFail(ctx, procedure, err)
	}
	defer st.Close()
	for st.Receive() {
		idle.Reset(streamIdle)
		if p := take(st.Msg()); p != nil && onProgress != nil {
			onProgress(nodev1.ProgressFromWire(p))
		}
	}
	return c.streamFail(ctx, procedure, st.Err())
}

// streamFail is fail, but the idle limit's own error when it cut the call.
func (c *Client) streamFail(ctx context.Context, procedure string, err error) error {
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return c.fail(procedure, err)
}

// finish is the answer of a streamed call: the result it carried, or an
// error when the stream ended without one.
func finish[T any](out *T, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	if out == nil {
		return nil, fmt.Errorf("%w: the node's answer ended without a result", errdefs.ErrUnavailable)
	}
	return out, nil
}
