package space

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// CreateSandbox creates a sandbox and returns it once the server reports it running.
func (c *Client) CreateSandbox(ctx context.Context, req sandboxv1.CreateSandboxRequest, opts ...CallOption) (*sandboxv1.Sandbox, error) {
	var sb sandboxv1.Sandbox
	r := request{method: http.MethodPost, path: "/v1/sandboxes", opts: opts}
	if err := c.call(ctx, r, req, &sb, maxJSONBody); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	return &sb, nil
}

// ListSandboxes lists every sandbox of the caller's tenant, oldest first.
//
// It reads the listing page by page (ListSandboxesFiltered with no
// filter): the unpaged answer grows with the tenant, and past a few
// thousand sandboxes with metadata it no longer fits the client's limit on
// one JSON body, so one request would fail where pages succeed. A sandbox
// created or deleted while the pages are read may be missed or listed.
func (c *Client) ListSandboxes(ctx context.Context) ([]sandboxv1.Sandbox, error) {
	return c.ListSandboxesFiltered(ctx, SandboxFilter{})
}

// SandboxFilter selects the sandboxes a listing returns; empty fields
// match all, and every Metadata pair must be in the sandbox's metadata.
type SandboxFilter struct {
	State    sandboxv1.State
	Template string
	Name     string
	Metadata map[string]string
}

// query is f as GET /v1/sandboxes takes it.
func (f SandboxFilter) query() (url.Values, error) {
	q := url.Values{}
	for k, v := range map[string]string{"state": string(f.State), "template": f.Template, "name": f.Name} {
		if v != "" {
			q.Set(k, v)
		}
	}
	keys := make([]string, 0, len(f.Metadata))
	for k := range f.Metadata {
		if k == "" || strings.Contains(k, "=") {
			return nil, fmt.Errorf("metadata key %q: want a non-empty key without '='", k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		q.Add("metadata", k+"="+f.Metadata[k])
	}
	return q, nil
}

// sandboxPageSize is the page ListSandboxesFiltered asks for.
const sandboxPageSize = 1000

// ListSandboxesPage lists one page of at most limit (1..1000) sandboxes
// that match f, oldest first; pass the answer's NextPageToken as pageToken
// for the next page (it is empty after the last).
func (c *Client) ListSandboxesPage(ctx context.Context, f SandboxFilter, limit int, pageToken string) (sandboxv1.SandboxList, error) {
	if limit < 1 || limit > sandboxPageSize {
		return sandboxv1.SandboxList{}, fmt.Errorf("list sandboxes: limit %d: want 1..%d", limit, sandboxPageSize)
	}
	q, err := f.query()
	if err != nil {
		return sandboxv1.SandboxList{}, fmt.Errorf("list sandboxes: %w", err)
	}
	q.Set("limit", strconv.Itoa(limit))
	if pageToken != "" {
		q.Set("page_token", pageToken)
	}
	var list sandboxv1.SandboxList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/v1/sandboxes", query: q}, nil, &list, maxJSONBody); err != nil {
		return sandboxv1.SandboxList{}, fmt.Errorf("list sandboxes: %w", err)
	}
	return list, nil
}

// ListSandboxesFiltered lists every sandbox that matches f, reading the
// listing page by page.
func (c *Client) ListSandboxesFiltered(ctx context.Context, f SandboxFilter) ([]sandboxv1.Sandbox, error) {
	var all []sandboxv1.Sandbox
	token := ""
	for {
		page, err := c.ListSandboxesPage(ctx, f, sandboxPageSize, token)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Sandboxes...)
		if page.NextPageToken == "" {
			return all, nil
		}
		if page.NextPageToken == token {
			return nil, fmt.Errorf("list sandboxes: the server gave the same page token twice")
		}
		token = page.NextPageToken
	}
}

// GetSandbox reads one sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (*sandboxv1.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodGet, id, "", nil, nil, "get")
}

// DeleteSandbox asks the server to delete a sandbox; WaitDeleted waits until it is gone.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	p, err := sandboxPath(id, "")
	if err != nil {
		return fmt.Errorf("delete sandbox: %w", err)
	}
	if err := c.call(ctx, request{method: http.MethodDelete, path: p}, nil, nil, 0); err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	return nil
}

// PauseSandbox pauses a running sandbox (target state paused).
func (c *Client) PauseSandbox(ctx context.Context, id string, opts ...CallOption) (*sandboxv1.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, id, "/pause", nil, opts, "pause")
}

// ResumeSandbox resumes a paused sandbox (target state running).
func (c *Client) ResumeSandbox(ctx context.Context, id string, opts ...CallOption) (*sandboxv1.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, id, "/resume", nil, opts, "resume")
}

// HibernateSandbox snapshots a sandbox to object storage and frees its node
// (target state hibernated).
func (c *Client) HibernateSandbox(ctx context.Context, id string, opts ...CallOption) (*sandboxv1.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, id, "/hibernate", nil, opts, "hibernate")
}

// RestoreSandbox brings a hibernated sandbox back on some node (target state running).
func (c *Client) RestoreSandbox(ctx context.Context, id string, opts ...CallOption) (*sandboxv1.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, id, "/restore", nil, opts, "restore")
}

// RestoreSandboxOn restores a hibernated sandbox on the named node (admin
// keys only); RestoreSandbox lets the scheduler choose.
func (c *Client) RestoreSandboxOn(ctx context.Context, id, node string, opts ...CallOption) (*sandboxv1.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, id, "/restore", sandboxv1.RestoreRequest{Node: node}, opts, "restore")
}

// StopSandbox stops a sandbox, keeping its filesystem (target state stopped).
func (c *Client) StopSandbox(ctx context.Context, id string, opts ...CallOption) (*sandboxv1.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, id, "/stop", nil, opts, "stop")
}

// StartSandbox starts a stopped sandbox (target state running).
func (c *Client) StartSandbox(ctx context.Context, id string, opts ...CallOption) (*sandboxv1.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, id, "/start", nil, opts, "start")
}

// ForkSandbox creates a new sandbox from a sandbox's filesystem, or from one of
// its snapshots when req.Snapshot is set, and returns the new sandbox.
func (c *Client) ForkSandbox(ctx context.Context, id string, req sandboxv1.ForkRequest, opts ...CallOption) (*sandboxv1.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, id, "/fork", req, opts, "fork")
}

// RollbackSandbox puts a sandbox's filesystem back to a snapshot and starts a new
// execution from it.
func (c *Client) RollbackSandbox(ctx context.Context, id, snapshot string, opts ...CallOption) (*sandboxv1.Sandbox, error) {
	if snapshot == "" {
		return nil, fmt.Errorf("rollback sandbox %s: snapshot id is empty", id)
	}
	req := sandboxv1.RollbackRequest{Snapshot: snapshot}
	return c.sandboxCall(ctx, http.MethodPost, id, "/rollback", req, opts, "rollback")
}

// sandboxCall performs a call on /v1/sandboxes/{id}{suffix} that answers a Sandbox.
func (c *Client) sandboxCall(ctx context.Context, method, id, suffix string, in any, opts []CallOption, what string) (*sandboxv1.Sandbox, error) {
	p, err := sandboxPath(id, suffix)
	if err != nil {
		return nil, fmt.Errorf("%s sandbox: %w", what, err)
	}
	var sb sandboxv1.Sandbox
	if err := c.call(ctx, request{method: method, path: p, opts: opts}, in, &sb, maxJSONBody); err != nil {
		return nil, fmt.Errorf("%s sandbox %s: %w", what, id, err)
	}
	return &sb, nil
}

// CreateSnapshot takes a snapshot of a sandbox.
func (c *Client) CreateSnapshot(ctx context.Context, id string, req sandboxv1.CreateSnapshotRequest, opts ...CallOption) (*sandboxv1.Snapshot, error) {
	p, err := sandboxPath(id, "/snapshots")
	if err != nil {
		return nil, fmt.Errorf("create snapshot: %w", err)
	}
	var snap sandboxv1.Snapshot
	if err := c.call(ctx, request{method: http.MethodPost, path: p, opts: opts}, req, &snap, maxJSONBody); err != nil {
		return nil, fmt.Errorf("create snapshot of sandbox %s: %w", id, err)
	}
	return &snap, nil
}

// ListSnapshots lists a sandbox's snapshots.
func (c *Client) ListSnapshots(ctx context.Context, id string) ([]sandboxv1.Snapshot, error) {
	p, err := sandboxPath(id, "/snapshots")
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var list sandboxv1.SnapshotList
	if err := c.call(ctx, request{method: http.MethodGet, path: p}, nil, &list, maxJSONBody); err != nil {
		return nil, fmt.Errorf("list snapshots of sandbox %s: %w", id, err)
	}
	return list.Snapshots, nil
}

// ExposePort makes a sandbox port reachable through the gateway and returns the URL.
func (c *Client) ExposePort(ctx context.Context, id string, req sandboxv1.ExposePortRequest, opts ...CallOption) (*sandboxv1.ServicePort, error) {
	p, err := sandboxPath(id, "/ports")
	if err != nil {
		return nil, fmt.Errorf("expose port: %w", err)
	}
	var sp sandboxv1.ServicePort
	if err := c.call(ctx, request{method: http.MethodPost, path: p, opts: opts}, req, &sp, maxJSONBody); err != nil {
		return nil, fmt.Errorf("expose port %d of sandbox %s: %w", req.Port, id, err)
	}
	return &sp, nil
}

// WaitForState polls a sandbox until it reaches want and returns it. It fails when
// the sandbox fails or is being deleted, and when ctx ends: a server may report the
// old state for a while after accepting an operation, so any other state is waited
// through.
func (c *Client) WaitForState(ctx context.Context, id string, want sandboxv1.State) (*sandboxv1.Sandbox, error) {
	var p poller
	for {
		sb, err := c.GetSandbox(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("wait for sandbox %s to be %s: %w", id, want, err)
		}
		switch {
		case sb.State == want:
			return sb, nil
		case sb.State == sandboxv1.StateFailed:
			return sb, fmt.Errorf("sandbox %s failed while waiting for it to be %s: %s", id, want, sb.Reason)
		case sb.State == sandboxv1.StateDeleted || sb.State == sandboxv1.StateDeleting:
			return sb, fmt.Errorf("sandbox %s is %s; it will not become %s", id, sb.State, want)
		}
		if err := p.wait(ctx); err != nil {
			return sb, fmt.Errorf("wait for sandbox %s to be %s (now %s): %w", id, want, sb.State, err)
		}
	}
}

// WaitDeleted polls a sandbox until the server no longer knows it or reports it
// deleted.
func (c *Client) WaitDeleted(ctx context.Context, id string) error {
	var p poller
	for {
		sb, err := c.GetSandbox(ctx, id)
		if IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("wait for sandbox %s to be deleted: %w", id, err)
		}
		switch sb.State {
		case sandboxv1.StateDeleted:
			return nil
		case sandboxv1.StateFailed:
			return fmt.Errorf("sandbox %s failed while being deleted: %s", id, sb.Reason)
		}
		if err := p.wait(ctx); err != nil {
			return fmt.Errorf("wait for sandbox %s to be deleted (now %s): %w", id, sb.State, err)
		}
	}
}

// poller spaces out polls: 100 ms at first, growing to 1 s.
type poller struct{ next time.Duration }

// wait sleeps for the next interval or until ctx ends.
func (p *poller) wait(ctx context.Context) error {
	if p.next == 0 {
		p.next = 100 * time.Millisecond
	}
	t := time.NewTimer(p.next)
	defer t.Stop()
	p.next = min(p.next*3/2, time.Second)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ListEvents returns a sandbox's history, oldest first.
func (c *Client) ListEvents(ctx context.Context, id string) ([]sandboxv1.Event, error) {
	p, err := sandboxPath(id, "/events")
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	var list sandboxv1.EventList
	if err := c.call(ctx, request{method: http.MethodGet, path: p}, nil, &list, maxJSONBody); err != nil {
		return nil, fmt.Errorf("list events of sandbox %s: %w", id, err)
	}
	return list.Events, nil
}

// SetTimeout makes the sandbox live timeout (a Go duration) from now; "0"
// removes its timeout.
func (c *Client) SetTimeout(ctx context.Context, id, timeout string, opts ...CallOption) (*sandboxv1.Sandbox, error) {
	return c.sandboxCall(ctx, http.MethodPost, id, "/timeout", sandboxv1.SetTimeoutRequest{Timeout: timeout}, opts, "set timeout of")
}

// DeleteSnapshot deletes one of a sandbox's snapshots.
func (c *Client) DeleteSnapshot(ctx context.Context, id, snapshot string) error {
	p, err := sandboxPath(id, "/snapshots/")
	if err != nil {
		return fmt.Errorf("delete snapshot: %w", err)
	}
	seg, err := pathSegment("snapshot id", snapshot)
	if err != nil {
		return fmt.Errorf("delete snapshot: %w", err)
	}
	if err := c.call(ctx, request{method: http.MethodDelete, path: p + seg}, nil, nil, 0); err != nil {
		return fmt.Errorf("delete snapshot %s of sandbox %s: %w", snapshot, id, err)
	}
	return nil
}
