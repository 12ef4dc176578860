// Package nodeclient is the control plane's client of a node's sandbox manager
// (node-api, api/node/v1): a thin wrapper over the generated Connect clients
// that speaks the control plane's Go types (nodev1) and errors (errdefs,
// through connecterr). It also hands out an HTTP client and base URL through
// which the control plane speaks the guest protocol to one execution, and the
// port proxy and TCP tunnel (ports.go), which stay plain HTTP.
package nodeclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/api/node/v1/nodeapi/nodeapiv1connect"
	"github.com/spacesandbox/space/internal/connecterr"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/unixsock"
)

// TokenHeader carries the node token; it matches node.TokenHeader.
const TokenHeader = "X-Space-Node-Token"

// maxAnswer bounds a node's answer.
const maxAnswer = 16 << 20

// Client calls one node.
type Client struct {
	addr   string
	base   string // "http://node" for unix sockets, else "http://HOST:PORT"
	token  string
	stream *http.Client // no overall timeout: streams live as long as their ctx
	// dial opens a connection to the node-api, for the tunnels that leave
	// HTTP after their first answer (DialPortTCP).
	dial func(ctx context.Context) (net.Conn, error)

	node       nodeapiv1connect.NodeServiceClient
	executions nodeapiv1connect.ExecutionServiceClient
	snapshots  nodeapiv1connect.SnapshotServiceClient
	templates  nodeapiv1connect.TemplateServiceClient
	// longSnapshots and longTemplates are the streaming calls, on the
	// client without an overall timeout.
	longSnapshots nodeapiv1connect.SnapshotServiceClient
	longTemplates nodeapiv1connect.TemplateServiceClient
}

// New returns a client of the node-api at addr ("unix:PATH" or "HOST:PORT").
func New(addr, token string) (*Client, error) {
	// DisableCompression: the transport would otherwise ask for gzip on
	// every request the Connect clients below leave without an
	// Accept-Encoding (all unary calls), and the node would compress each
	// answer (TestUnaryCallsAreNotCompressed).
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
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
	plain := &http.Client{Transport: rt, Timeout: 10 * time.Minute}
	stream := &http.Client{Transport: rt}
	// No gzip: Connect clients offer it by default and the node then
	// compresses every answer (a fresh compressor each), for messages of a
	// few hundred bytes; the large transfers are streams of sealed bytes
	// that do not compress. The transport's DisableCompression keeps it
	// from offering gzip in Connect's place.
	opts := []connect.ClientOption{connect.WithReadMaxBytes(maxAnswer), connect.WithAcceptCompression("gzip", nil, nil)}
	return &Client{
		addr: addr, base: base, token: token, stream: stream, dial: dial,
		node:          nodeapiv1connect.NewNodeServiceClient(plain, base, opts...),
		executions:    nodeapiv1connect.NewExecutionServiceClient(plain, base, opts...),
		snapshots:     nodeapiv1connect.NewSnapshotServiceClient(plain, base, opts...),
		templates:     nodeapiv1connect.NewTemplateServiceClient(plain, base, opts...),
		longSnapshots: nodeapiv1connect.NewSnapshotServiceClient(stream, base, opts...),
		longTemplates: nodeapiv1connect.NewTemplateServiceClient(stream, base, opts...),
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
	resp, err := c.node.Info(ctx, connect.NewRequest(&nodeapiv1.InfoRequest{}))
	if err != nil {
		return nil, c.fail("Info", err)
	}
	info := nodev1.InfoFromWire(resp.Msg)
	return &info, nil
}

// Start starts an execution and waits until its guest is ready.
func (c *Client) Start(ctx context.Context, req nodev1.StartExecution) (*nodev1.Execution, error) {
	resp, err := c.executions.Start(ctx, connect.NewRequest(req.ToWire()))
	if err != nil {
		return nil, c.fail("Start", err)
	}
	ex := nodev1.ExecutionFromWire(resp.Msg.GetExecution())
	return &ex, nil
}

// Stop stops an execution; an unknown one succeeds.
func (c *Client) Stop(ctx context.Context, execID string) error {
	_, err := c.executions.Stop(ctx, connect.NewRequest(&nodeapiv1.StopExecutionRequest{ExecId: execID}))
	return c.fail("Stop", err)
}

// Pause freezes an execution in place.
func (c *Client) Pause(ctx context.Context, execID string) error {
	_, err := c.executions.Pause(ctx, connect.NewRequest(&nodeapiv1.PauseExecutionRequest{ExecId: execID}))
	return c.fail("Pause", err)
}

// SetEgress replaces a running execution's egress policy.
func (c *Client) SetEgress(ctx context.Context, execID string, policy json.RawMessage) error {
	_, err := c.executions.SetEgress(ctx, connect.NewRequest(&nodeapiv1.SetEgressRequest{ExecId: execID, Egress: policy}))
	return c.fail("SetEgress", err)
}

// Resume thaws a paused execution.
func (c *Client) Resume(ctx context.Context, execID string) error {
	_, err := c.executions.Resume(ctx, connect.NewRequest(&nodeapiv1.ResumeExecutionRequest{ExecId: execID}))
	return c.fail("Resume", err)
}

// Stats measures what an execution uses now.
func (c *Client) Stats(ctx context.Context, execID string) (*nodev1.ExecStats, error) {
	resp, err := c.executions.Stats(ctx, connect.NewRequest(&nodeapiv1.ExecutionStatsRequest{ExecId: execID}))
	if err != nil {
		return nil, c.fail("Stats", err)
	}
	st := nodev1.ExecStatsFromWire(resp.Msg)
	return &st, nil
}

// Get reports one execution.
func (c *Client) Get(ctx context.Context, execID string) (*nodev1.Execution, error) {
	resp, err := c.executions.Get(ctx, connect.NewRequest(&nodeapiv1.GetExecutionRequest{ExecId: execID}))
	if err != nil {
		return nil, c.fail("Get", err)
	}
	ex := nodev1.ExecutionFromWire(resp.Msg.GetExecution())
	return &ex, nil
}

// List reports every execution on the node.
func (c *Client) List(ctx context.Context) ([]nodev1.Execution, error) {
	resp, err := c.executions.List(ctx, connect.NewRequest(&nodeapiv1.ListExecutionsRequest{}))
	if err != nil {
		return nil, c.fail("List", err)
	}
	return nodev1.ExecutionsFromWire(resp.Msg.GetExecutions()), nil
}

// ListSandbox reports the executions of sandbox sandboxID on the node. A
// node older than the request's filter answers every execution: they are
// filtered here.
func (c *Client) ListSandbox(ctx context.Context, sandboxID string) ([]nodev1.Execution, error) {
	resp, err := c.executions.List(ctx, connect.NewRequest(&nodeapiv1.ListExecutionsRequest{SandboxId: sandboxID}))
	if err != nil {
		return nil, c.fail("List", err)
	}
	var out []nodev1.Execution
	for _, ex := range nodev1.ExecutionsFromWire(resp.Msg.GetExecutions()) {
		if ex.SandboxID == sandboxID {
			out = append(out, ex)
		}
	}
	return out, nil
}

// DeleteTemplate removes a template from the node.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	_, err := c.templates.Delete(ctx, connect.NewRequest(&nodeapiv1.DeleteTemplateRequest{Name: name}))
	return c.fail("DeleteTemplate", err)
}

// Templates lists the templates present on the node.
func (c *Client) Templates(ctx context.Context) ([]string, error) {
	resp, err := c.templates.List(ctx, connect.NewRequest(&nodeapiv1.ListTemplatesRequest{}))
	if err != nil {
		return nil, c.fail("Templates", err)
	}
	return resp.Msg.GetTemplates(), nil
}

// Snapshot takes a snapshot of an execution.
func (c *Client) Snapshot(ctx context.Context, execID string, req nodev1.TakeSnapshot) (*nodev1.Snapshot, error) {
	resp, err := c.executions.TakeSnapshot(ctx, connect.NewRequest(&nodeapiv1.TakeSnapshotRequest{
		ExecId: execID, SnapshotId: req.SnapshotID, Kind: req.Kind, LeavePaused: req.LeavePaused,
	}))
	if err != nil {
		return nil, c.fail("TakeSnapshot", err)
	}
	snap := nodev1.SnapshotFromWire(resp.Msg.GetSnapshot())
	return &snap, nil
}

// DeleteSnapshot removes a snapshot from the node; a missing one succeeds.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	_, err := c.snapshots.Delete(ctx, connect.NewRequest(&nodeapiv1.DeleteSnapshotRequest{SnapshotId: id}))
	return c.fail("DeleteSnapshot", err)
}

// Snapshots lists the snapshots on the node.
func (c *Client) Snapshots(ctx context.Context) ([]nodev1.Snapshot, error) {
	resp, err := c.snapshots.List(ctx, connect.NewRequest(&nodeapiv1.ListSnapshotsRequest{}))
	if err != nil {
		return nil, c.fail("Snapshots", err)
	}
	var out []nodev1.Snapshot
	for _, s := range resp.Msg.GetSnapshots() {
		out = append(out, nodev1.SnapshotFromWire(s))
	}
	return out, nil
}

// CollectOrphans has the node find the executions its runtimes hold that
// no runtime record refers to and, unless dryRun, stop and clean them.
func (c *Client) CollectOrphans(ctx context.Context, dryRun bool) (*nodev1.Orphans, error) {
	resp, err := c.node.CollectOrphans(ctx, connect.NewRequest(&nodeapiv1.CollectOrphansRequest{DryRun: dryRun}))
	if err != nil {
		return nil, c.fail("CollectOrphans", err)
	}
	o := nodev1.OrphansFromWire(resp.Msg)
	return &o, nil
}

// fail is the error of a call to procedure that ended with err (nil: nil):
// the node's error with its class and reason (connecterr), a node that
// could not be reached as Unavailable, and a node that does not serve the
// Connect node API (its refusal lacks nodev1.VersionHeader: an older one)
// as FailedPrecondition saying so.
func (c *Client) fail(procedure string, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("%w: node %s %s: %v", errdefs.ErrUnavailable, c.addr, procedure, err)
	}
	if !connect.IsWireError(ce) && (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)) {
		// The client made the error, not the node: its answer broke
		// off (a node killed mid-stream leaves "incomplete envelope:
		// unexpected EOF"). The node may be back soon: retry.
		return fmt.Errorf("%w: node %s %s: its answer broke off: %v", errdefs.ErrUnavailable, c.addr, procedure, err)
	}
	if (ce.Code() == connect.CodeUnimplemented || ce.Code() == connect.CodeNotFound) && ce.Meta().Get(nodev1.VersionHeader) == "" {
		return fmt.Errorf("%w: node %s %s: %w (it answers %v %q)", errdefs.ErrFailedPrecondition, c.addr, procedure, ErrOlderNode, ce.Code(), ce.Message())
	}
	return &Error{Message: ce.Message(), cause: connecterr.Decode(err)}
}

// ErrOlderNode marks a node that does not serve this control plane's node
// API (it answers the Connect routes 404): it runs an older version.
var ErrOlderNode = errors.New("the node speaks an older node API (v1, JSON routes) than this control plane (v2, Connect): upgrade the node to the control plane's version")

// Error is an error a node answered; errors.Is matches its class and its
// reason.
type Error struct {
	Message string
	// cause is the connecterr decoding of the answer, or for the plain
	// HTTP routes the class the JSON code names.
	cause error
}

func (e *Error) Error() string { return "node: " + e.Message }

// Unwrap returns the class (and reason) of the error.
func (e *Error) Unwrap() error { return e.cause }
