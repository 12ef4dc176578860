package privop

import (
	"github.com/spacesandbox/space/internal/driver"

	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/progress"
	"github.com/spacesandbox/space/internal/unixsock"
)

// Client calls a node-manager.
type Client struct {
	socket string
}

// NewClient returns a client of the node-manager at socket.
func NewClient(socket string) *Client { return &Client{socket: socket} }

// Socket is the node-manager socket the client calls.
func (c *Client) Socket() string { return c.socket }

// call sends req and returns the response and any file it carried. The context
// bounds the whole exchange.
func (c *Client) call(ctx context.Context, req Request) (*Response, []*os.File, error) {
	return c.callProgress(ctx, req, nil)
}

// callProgress is call for a request that asked for progress: onProgress
// receives each reading that precedes the answer.
func (c *Client) callProgress(ctx context.Context, req Request, onProgress func(progress.Report)) (*Response, []*os.File, error) {
	conn, err := unixsock.Dial(ctx, c.socket)
	if err != nil {
		return nil, nil, fmt.Errorf("node-manager %s: connect %s: %w (is `space node-manager` running?): %w", req.Op, c.socket, err, errdefs.ErrUnavailable)
	}
	uc := conn.(*net.UnixConn)
	defer uc.Close()
	// The connection's deadline is set once ctx is done, not to ctx's
	// deadline: a socket deadline can fire before ctx's own timer has
	// marked it done, and the failed read would then look like a
	// node-manager that went away (Unavailable) instead of the caller's
	// deadline (TestNodeManagerGone, under load).
	stop := context.AfterFunc(ctx, func() { _ = uc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := WriteMessage(uc, req); err != nil {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("node-manager %s: send: %w", req.Op, ctx.Err())
		}
		return nil, nil, fmt.Errorf("node-manager %s: send: %w: %w", req.Op, err, errdefs.ErrUnavailable)
	}
	var resp Response
	var files []*os.File
	for {
		resp = Response{}
		files, err = ReadMessage(uc, &resp)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, fmt.Errorf("node-manager %s: receive: %w", req.Op, ctx.Err())
			}
			// The node-manager went away (killed, restarting) before it
			// answered: whether the operation happened is unknown, and
			// every operation is safe to retry.
			return nil, nil, fmt.Errorf("node-manager %s: receive: %w (the node-manager went away before it answered; retry): %w", req.Op, err, errdefs.ErrUnavailable)
		}
		if resp.Progress == nil || resp.Error != "" {
			break
		}
		// A reading before the answer (only sent when asked for).
		CloseFiles(files)
		if onProgress != nil {
			onProgress(*resp.Progress)
		}
	}
	if resp.Error != "" {
		CloseFiles(files)
		return nil, nil, remoteError(req.Op, &resp)
	}
	return &resp, files, nil
}

// Hello asks the node-manager what it offers.
func (c *Client) Hello(ctx context.Context) (*Hello, error) {
	r, _, err := c.call(ctx, Request{Op: OpHello})
	if err != nil {
		return nil, err
	}
	if r.Hello == nil {
		return nil, fmt.Errorf("node-manager hello: empty answer")
	}
	return r.Hello, nil
}

// EnsureTemplate makes the template present on the node, building it from
// source when it is not. Concurrent calls for one name share one build.
func (c *Client) EnsureTemplate(ctx context.Context, name, source string) (*TemplateOK, error) {
	r, _, err := c.call(ctx, Request{Op: OpEnsureTemplate, Template: &TemplateArgs{Name: name, Source: source}})
	if err != nil {
		return nil, err
	}
	if r.Template == nil {
		return &TemplateOK{}, nil
	}
	return r.Template, nil
}

// EnsureTemplateProgress is EnsureTemplate with the build's readings:
// onProgress receives them, about one a second, while the build runs.
func (c *Client) EnsureTemplateProgress(ctx context.Context, name, source string, onProgress func(progress.Report)) (*TemplateOK, error) {
	r, _, err := c.callProgress(ctx, Request{Op: OpEnsureTemplate, Template: &TemplateArgs{Name: name, Source: source, Progress: true}}, onProgress)
	if err != nil {
		return nil, err
	}
	if r.Template == nil {
		return &TemplateOK{}, nil
	}
	return r.Template, nil
}

// DeleteTemplate removes a template from the node.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	_, _, err := c.call(ctx, Request{Op: OpDeleteTemplate, Template: &TemplateArgs{Name: name}})
	return err
}

// Templates lists the templates present on the node.
func (c *Client) Templates(ctx context.Context) ([]string, error) {
	r, _, err := c.call(ctx, Request{Op: OpListTemplates})
	if err != nil {
		return nil, err
	}
	return r.Templates, nil
}

// Start starts an execution and returns the host end of its guest channel.
func (c *Client) Start(ctx context.Context, a StartArgs) (*Started, *os.File, *driver.Link, error) {
	r, files, err := c.call(ctx, Request{Op: OpStart, Start: &a})
	if err != nil {
		return nil, nil, nil, err
	}
	want := 1
	if r.Started != nil && r.Started.Link != "" {
		want = 2
	}
	if r.Started == nil || len(files) != want || (a.Network && want != 2) {
		CloseFiles(files)
		return nil, nil, nil, fmt.Errorf("node-manager start %s: answer without a guest channel or the network link it asked for", a.ExecID)
	}
	var link *driver.Link
	if want == 2 {
		link = &driver.Link{File: files[1], Framing: driver.LinkFraming(r.Started.Link)}
	}
	return r.Started, files[0], link, nil
}

// ReopenLink gives a running execution a new network link (after this
// node's sandbox manager restarted and lost the old one).
func (c *Client) ReopenLink(ctx context.Context, execID, runtime string) (*driver.Link, error) {
	r, files, err := c.call(ctx, Request{Op: OpReopenLink, ExecID: execID, Runtime: runtime})
	if err != nil {
		return nil, err
	}
	if r.Started == nil || r.Started.Link == "" || len(files) != 1 {
		CloseFiles(files)
		return nil, fmt.Errorf("node-manager reopen_link %s: answer without a link", execID)
	}
	return &driver.Link{File: files[0], Framing: driver.LinkFraming(r.Started.Link)}, nil
}

// Cleanup kills everything of an execution and releases its resources.
// Cleaning up an unknown execution succeeds. runtime names its driver when
// known ("" asks every driver).
func (c *Client) Cleanup(ctx context.Context, execID, runtime string) error {
	_, _, err := c.call(ctx, Request{Op: OpCleanup, ExecID: execID, Runtime: runtime})
	return err
}

// Pause freezes an execution of the named runtime.
func (c *Client) Pause(ctx context.Context, execID, runtime string) error {
	_, _, err := c.call(ctx, Request{Op: OpPause, ExecID: execID, Runtime: runtime})
	return err
}

// Resume thaws an execution of the named runtime.
func (c *Client) Resume(ctx context.Context, execID, runtime string) error {
	_, _, err := c.call(ctx, Request{Op: OpResume, ExecID: execID, Runtime: runtime})
	return err
}

// Stats reads an execution's resource usage.
func (c *Client) Stats(ctx context.Context, execID string) (*Stats, error) {
	r, _, err := c.call(ctx, Request{Op: OpStats, ExecID: execID})
	if err != nil {
		return nil, err
	}
	return r.Stats, nil
}

// ListExecutions lists the executions every ready runtime holds state for,
// whoever started them, and the runtimes not ready yet.
func (c *Client) ListExecutions(ctx context.Context) (*Executions, error) {
	r, _, err := c.call(ctx, Request{Op: OpListExecutions})
	if err != nil {
		return nil, err
	}
	if r.Executions == nil {
		return nil, fmt.Errorf("node-manager list_executions: answer without executions")
	}
	return r.Executions, nil
}

// Alive reports whether any process of the execution still runs.
func (c *Client) Alive(ctx context.Context, execID string) (bool, error) {
	r, _, err := c.call(ctx, Request{Op: OpAlive, ExecID: execID})
	if err != nil {
		return false, err
	}
	return r.Alive != nil && *r.Alive, nil
}

// Snapshot takes a snapshot of an execution (see SnapshotArgs).
func (c *Client) Snapshot(ctx context.Context, a SnapshotArgs) (*SnapshotInfo, error) {
	r, _, err := c.call(ctx, Request{Op: OpSnapshot, Snapshot: &a})
	if err != nil {
		return nil, err
	}
	if r.Snapshot == nil {
		return nil, fmt.Errorf("node-manager snapshot %s: empty answer", a.SnapshotID)
	}
	return r.Snapshot, nil
}

// DeleteSnapshot removes a snapshot from the node; a missing one succeeds.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	_, _, err := c.call(ctx, Request{Op: OpDeleteSnapshot, SnapshotID: id})
	return err
}

// Snapshots lists the complete snapshots on the node.
func (c *Client) Snapshots(ctx context.Context) ([]SnapshotInfo, error) {
	r, _, err := c.call(ctx, Request{Op: OpListSnapshots})
	if err != nil {
		return nil, err
	}
	return r.Snapshots, nil
}

// Export writes the artifacts of a node-local snapshot for upload and
// describes them (see export.go).
func (c *Client) Export(ctx context.Context, snapshotID string) (*Export, error) {
	r, _, err := c.call(ctx, Request{Op: OpExport, Export: &ExportArgs{SnapshotID: snapshotID}})
	if err != nil {
		return nil, err
	}
	if r.Export == nil {
		return nil, fmt.Errorf("node-manager export %s: empty answer", snapshotID)
	}
	return r.Export, nil
}

// OpenExportFile returns an exported artifact, read-only.
func (c *Client) OpenExportFile(ctx context.Context, snapshotID, name string) (*os.File, error) {
	return c.fileCall(ctx, Request{Op: OpOpenExport, Export: &ExportArgs{SnapshotID: snapshotID, Name: name}})
}

// CreateImportFile returns a staging file of an import, for writing.
func (c *Client) CreateImportFile(ctx context.Context, snapshotID, name string) (*os.File, error) {
	return c.fileCall(ctx, Request{Op: OpCreateImport, Export: &ExportArgs{SnapshotID: snapshotID, Name: name}})
}

// SealImport verifies the staged artifacts against e and rebuilds the
// snapshot on the node.
func (c *Client) SealImport(ctx context.Context, e *Export) (*SnapshotInfo, error) {
	r, _, err := c.call(ctx, Request{Op: OpSealImport, Export: &ExportArgs{SnapshotID: e.Snapshot.ID, Export: e}})
	if err != nil {
		return nil, err
	}
	if r.Snapshot == nil {
		return nil, fmt.Errorf("node-manager import %s: empty answer", e.Snapshot.ID)
	}
	return r.Snapshot, nil
}

func (c *Client) fileCall(ctx context.Context, req Request) (*os.File, error) {
	_, files, err := c.call(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(files) != 1 {
		CloseFiles(files)
		return nil, fmt.Errorf("node-manager %s: answer without a file", req.Op)
	}
	return files[0], nil
}
