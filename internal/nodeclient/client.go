// Package nodeclient is the control plane's client of a node's sandbox manager
// (node-api, api/node/v1). It also hands out an HTTP client and base URL through
// which the control plane speaks the guest protocol to one execution.
package nodeclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/spacesandbox/space/internal/apierr"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/unixsock"
)

// TokenHeader carries the node token; it matches node.TokenHeader.
const TokenHeader = "X-Space-Node-Token"

// Client calls one node.
type Client struct {
	base   string // "http://node" for unix sockets, else "http://HOST:PORT"
	token  string
	http   *http.Client
	stream *http.Client // no overall timeout: streams live as long as their ctx
	// dial opens a connection to the node-api, for the tunnels that leave
	// HTTP after their first answer (DialPortTCP).
	dial func(ctx context.Context) (net.Conn, error)
}

// New returns a client of the node-api at addr ("unix:PATH" or "HOST:PORT").
func New(addr, token string) (*Client, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
	base := "http://node"
	var dial func(ctx context.Context) (net.Conn, error)
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		dial = func(ctx context.Context) (net.Conn, error) {
			c, err := unixsock.Dial(ctx, path)
			if uc, ok := c.(*net.UnixConn); ok && err == nil {
				// File uploads: a 256 KiB write fits (see bridge.SocketBufferSize).
				_ = uc.SetWriteBuffer(1 << 20)
			}
			return c, err
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) }
	} else {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("node address %q: want unix:PATH or HOST:PORT", addr)
		}
		base = "http://" + addr
		dial = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	rt := tokenTransport{token: token, next: tr}
	return &Client{
		base:   base,
		token:  token,
		http:   &http.Client{Transport: rt, Timeout: 10 * time.Minute},
		stream: &http.Client{Transport: rt},
		dial:   dial,
	}, nil
}

type tokenTransport struct {
	token string
	next  http.RoundTripper
}

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(TokenHeader, t.token)
	return t.next.RoundTrip(r)
}

// GuestHTTP returns the HTTP client and base URL that reach the public guest
// routes of one execution on this node, e.g. base+"/process.Process/Start".
func (c *Client) GuestHTTP(execID string) (*http.Client, string) {
	return c.stream, c.base + "/node/v1/executions/" + url.PathEscape(execID) + "/guest"
}

// Info reads the node's description.
func (c *Client) Info(ctx context.Context) (*nodev1.Info, error) {
	var out nodev1.Info
	return &out, c.do(ctx, http.MethodGet, "/node/v1/info", nil, &out)
}

// Start starts an execution and waits until its guest is ready.
func (c *Client) Start(ctx context.Context, req nodev1.StartExecution) (*nodev1.Execution, error) {
	var out nodev1.Execution
	return &out, c.do(ctx, http.MethodPost, "/node/v1/executions", req, &out)
}

// Stop stops an execution; an unknown one succeeds.
func (c *Client) Stop(ctx context.Context, execID string) error {
	return c.do(ctx, http.MethodDelete, "/node/v1/executions/"+url.PathEscape(execID), nil, nil)
}

// Pause freezes an execution in place.
func (c *Client) Pause(ctx context.Context, execID string) error {
	return c.do(ctx, http.MethodPost, "/node/v1/executions/"+url.PathEscape(execID)+"/pause", nil, nil)
}

// SetEgress replaces a running execution's egress policy.
func (c *Client) SetEgress(ctx context.Context, execID string, policy json.RawMessage) error {
	return c.do(ctx, http.MethodPut, "/node/v1/executions/"+url.PathEscape(execID)+"/egress", nodev1.SetEgress{Egress: policy}, nil)
}

// Resume thaws a paused execution.
func (c *Client) Resume(ctx context.Context, execID string) error {
	return c.do(ctx, http.MethodPost, "/node/v1/executions/"+url.PathEscape(execID)+"/resume", nil, nil)
}

// Stats measures what an execution uses now.
func (c *Client) Stats(ctx context.Context, execID string) (*nodev1.ExecStats, error) {
	var out nodev1.ExecStats
	return &out, c.do(ctx, http.MethodGet, "/node/v1/executions/"+url.PathEscape(execID)+"/stats", nil, &out)
}

// Get reports one execution.
func (c *Client) Get(ctx context.Context, execID string) (*nodev1.Execution, error) {
	var out nodev1.Execution
	return &out, c.do(ctx, http.MethodGet, "/node/v1/executions/"+url.PathEscape(execID), nil, &out)
}

// List reports every execution on the node.
func (c *Client) List(ctx context.Context) ([]nodev1.Execution, error) {
	var out nodev1.ExecutionList
	if err := c.do(ctx, http.MethodGet, "/node/v1/executions", nil, &out); err != nil {
		return nil, err
	}
	return out.Executions, nil
}

// EnsureTemplate makes a template present on the node, building it when
// absent, and returns its size there.
func (c *Client) EnsureTemplate(ctx context.Context, name, source string) (*nodev1.TemplateReady, error) {
	var out nodev1.TemplateReady
	return &out, c.do(ctx, http.MethodPost, "/node/v1/templates", nodev1.EnsureTemplate{Name: name, Source: source}, &out)
}

// EnsureTemplateProgress is EnsureTemplate with the build's readings:
// onProgress receives them while it runs. A node that cannot stream them
// answers without.
func (c *Client) EnsureTemplateProgress(ctx context.Context, name, source string, onProgress func(nodev1.Progress)) (*nodev1.TemplateReady, error) {
	var out nodev1.TemplateReady
	return &out, c.doProgress(ctx, "/node/v1/templates", nodev1.EnsureTemplate{Name: name, Source: source}, &out, onProgress)
}

// DeleteTemplate removes a template from the node.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/node/v1/templates/"+url.PathEscape(name), nil, nil)
}

// Templates lists the templates present on the node.
func (c *Client) Templates(ctx context.Context) ([]string, error) {
	var out nodev1.TemplateList
	if err := c.do(ctx, http.MethodGet, "/node/v1/templates", nil, &out); err != nil {
		return nil, err
	}
	return out.Templates, nil
}

// Snapshot takes a snapshot of an execution.
func (c *Client) Snapshot(ctx context.Context, execID string, req nodev1.TakeSnapshot) (*nodev1.Snapshot, error) {
	var out nodev1.Snapshot
	return &out, c.do(ctx, http.MethodPost, "/node/v1/executions/"+url.PathEscape(execID)+"/snapshots", req, &out)
}

// DeleteSnapshot removes a snapshot from the node; a missing one succeeds.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/node/v1/snapshots/"+url.PathEscape(id), nil, nil)
}

// Upload stores a snapshot's artifacts in object storage.
func (c *Client) Upload(ctx context.Context, id string, req nodev1.UploadSnapshot) (*nodev1.Artifacts, error) {
	var out nodev1.Artifacts
	return &out, c.do(ctx, http.MethodPost, "/node/v1/snapshots/"+url.PathEscape(id)+"/upload", req, &out)
}

// Download rebuilds a snapshot on the node from object storage.
func (c *Client) Download(ctx context.Context, id string, req nodev1.DownloadSnapshot) (*nodev1.Snapshot, error) {
	var out nodev1.Snapshot
	return &out, c.do(ctx, http.MethodPost, "/node/v1/snapshots/"+url.PathEscape(id)+"/download", req, &out)
}

// UploadProgress is Upload with readings of the bytes sent while it runs.
func (c *Client) UploadProgress(ctx context.Context, id string, req nodev1.UploadSnapshot, onProgress func(nodev1.Progress)) (*nodev1.Artifacts, error) {
	var out nodev1.Artifacts
	return &out, c.doProgress(ctx, "/node/v1/snapshots/"+url.PathEscape(id)+"/upload", req, &out, onProgress)
}

// DownloadProgress is Download with readings of the bytes received while
// it runs.
func (c *Client) DownloadProgress(ctx context.Context, id string, req nodev1.DownloadSnapshot, onProgress func(nodev1.Progress)) (*nodev1.Snapshot, error) {
	var out nodev1.Snapshot
	return &out, c.doProgress(ctx, "/node/v1/snapshots/"+url.PathEscape(id)+"/download", req, &out, onProgress)
}

// CollectOrphans has the node find the executions its runtimes hold that
// no runtime record refers to and, unless dryRun, stop and clean them.
func (c *Client) CollectOrphans(ctx context.Context, dryRun bool) (*nodev1.Orphans, error) {
	var out nodev1.Orphans
	if err := c.do(ctx, http.MethodPost, "/node/v1/orphans", nodev1.CollectOrphans{DryRun: dryRun}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Snapshots lists the snapshots on the node.
func (c *Client) Snapshots(ctx context.Context) ([]nodev1.Snapshot, error) {
	var out nodev1.SnapshotList
	if err := c.do(ctx, http.MethodGet, "/node/v1/snapshots", nil, &out); err != nil {
		return nil, err
	}
	return out.Snapshots, nil
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: node %s %s: %v", errdefs.ErrUnavailable, method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return decodeError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(out); err != nil {
		return fmt.Errorf("node %s %s: bad answer: %w", method, path, err)
	}
	return nil
}

// streamIdle is how long a streamed answer may go without a line: the
// plain client's whole timeout (a variable for tests).
var streamIdle = 10 * time.Minute

// doProgress POSTs in and asks for a streamed answer
// (nodev1.ProgressContentType): onProgress receives each reading, out the
// result. A node that answers plain JSON is read as do reads it.
func (c *Client) doProgress(ctx context.Context, path string, in, out any, onProgress func(nodev1.Progress)) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	// The stream client: the operation may outlast the plain client's
	// timeout while its readings show it alive; a node silent for as long
	// as that timeout is given up.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := time.AfterFunc(streamIdle, func() {
		cancel(fmt.Errorf("%w: node POST %s: no answer or reading for %v", errdefs.ErrUnavailable, path, streamIdle))
	})
	defer idle.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", nodev1.ProgressContentType+", application/json")
	resp, err := c.stream.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		return fmt.Errorf("%w: node POST %s: %v", errdefs.ErrUnavailable, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return decodeError(resp)
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, 1<<30))
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), nodev1.ProgressContentType) {
		if err := dec.Decode(out); err != nil {
			return fmt.Errorf("node POST %s: bad answer: %w", path, err)
		}
		return nil
	}
	for {
		var line nodev1.ProgressLine
		if err := dec.Decode(&line); err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("%w: node POST %s: the answer ended early: %v", errdefs.ErrUnavailable, path, err)
		}
		switch {
		case line.Error != nil:
			return answered(line.Error.Message, line.Error.Code, line.Error.Reason)
		case line.Result != nil:
			if err := json.Unmarshal(line.Result, out); err != nil {
				return fmt.Errorf("node POST %s: bad answer: %w", path, err)
			}
			return nil
		case line.Progress != nil:
			idle.Reset(streamIdle)
			if onProgress != nil {
				onProgress(*line.Progress)
			}
		}
	}
}

// decodeError reads a node's error answer through the table
// (internal/apierr): the code and reason decide the class, never the text.
func decodeError(resp *http.Response) error {
	var e nodev1.Error
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &e) != nil || e.Message == "" {
		e.Message = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return answered(e.Message, e.Code, e.Reason)
}

// answered is the error of a node's answer with message, code and reason.
func answered(message, code, reason string) *Error {
	return &Error{Message: message, class: apierr.Decode(code, errdefs.Reason(reason))}
}

// Error is an error a node answered; errors.Is matches its class and its
// reason (errdefs.ReasonOf gives the reason).
type Error struct {
	Message string
	// class is the reason's sentinel (of its class too) or the class; nil
	// for an answer of no class.
	class error
}

func (e *Error) Error() string { return "node: " + e.Message }

// Unwrap returns the error's reason or class, nil for none.
func (e *Error) Unwrap() error { return e.class }
