package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/api/node/v1/nodeapi/nodeapiv1connect"
	"github.com/spacesandbox/space/internal/connecterr"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/scheduler"
)

// testHeartbeat is a node's heartbeat in the tests.
type testHeartbeat struct {
	Address, Token            string
	Runtimes, RuntimesPending []string
	CPUs, MemoryMiB, DiskMiB  int
	Executions                []nodev1.Execution
	// Memory is what the node measured of its memory (zero: nothing).
	Memory scheduler.Memory
}

// wire is hb of node id as it travels.
func (hb testHeartbeat) wire(id string) *nodeapiv1.Heartbeat {
	return &nodeapiv1.Heartbeat{
		NodeId: id, Address: hb.Address, Token: hb.Token, Runtimes: hb.Runtimes, RuntimesPending: hb.RuntimesPending,
		Cpus: int64(hb.CPUs), MemoryMib: int64(hb.MemoryMiB), DiskMib: int64(hb.DiskMiB),
		Executions:     nodev1.ExecutionsToWire(hb.Executions),
		MemoryMeasured: hb.Memory.Measured, MemoryTotalMib: int64(hb.Memory.TotalMiB), AvailableMib: int64(hb.Memory.AvailableMiB),
		MemoryPressure: hb.Memory.Pressure,
	}
}

// heartbeatVia sends hb as node id's heartbeat, with the join token, to the
// control plane at base through hc (nil: http.DefaultClient), as a node
// does. The error has the class the control plane answered.
func heartbeatVia(ctx context.Context, hc *http.Client, base, id string, hb testHeartbeat) (*nodeapiv1.HeartbeatReply, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	req := connect.NewRequest(hb.wire(id))
	req.Header().Set("Authorization", "Bearer "+testJoinToken)
	resp, err := nodeapiv1connect.NewControlPlaneServiceClient(hc, base).Heartbeat(ctx, req)
	if err != nil {
		return nil, connecterr.Decode(err)
	}
	return resp.Msg, nil
}

// httpStatusOf is the HTTP status of a heartbeat's error, as the tests of
// the JSON heartbeat checked it: 200 for none.
func httpStatusOf(err error) int {
	if err == nil {
		return http.StatusOK
	}
	status, _ := statusOf(err)
	return status
}

// internalOf is the internal-service list of a heartbeat reply.
func internalOf(reply *nodeapiv1.HeartbeatReply) InternalServices {
	return InternalServices{Version: reply.GetInternal().GetVersion(), CIDRs: reply.GetInternal().GetCidrs()}
}

// fakeNodeAPI is a node API in the tests: each call whose func is set is
// answered by it, any other is Unimplemented. Errors cross as a node's do
// (connecterr).
type fakeNodeAPI struct {
	start     func(nodev1.StartExecution) (*nodev1.Execution, error)
	setEgress func(exec string, policy json.RawMessage) error
	stop      func(exec string) error
	pause     func(exec string) error
	resume    func(exec string) error
	snapshot  func(exec string, req nodev1.TakeSnapshot) (*nodev1.Snapshot, error)
	stats     func(exec string) (*nodev1.ExecStats, error)
	// deleteSnapshot answers SnapshotService.Delete.
	deleteSnapshot func(id string) error
	// token, when set, is the node token every call must carry.
	token string
}

// mount registers the fake's Connect services on mux.
func (n *fakeNodeAPI) mount(mux *http.ServeMux) {
	opts := connect.WithInterceptors(connecterr.Interceptor(), n.tokenCheck())
	for _, route := range []func() (string, http.Handler){
		func() (string, http.Handler) {
			return nodeapiv1connect.NewExecutionServiceHandler(fakeNodeExecutions{n: n}, opts)
		},
		func() (string, http.Handler) {
			return nodeapiv1connect.NewSnapshotServiceHandler(fakeNodeSnapshots{n: n}, opts)
		},
	} {
		path, h := route()
		mux.Handle(path, versioned(h))
	}
}

// versioned answers with the node API's version header, as a node does.
func versioned(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(nodev1.VersionHeader, nodev1.Version)
		h.ServeHTTP(w, r)
	})
}

// tokenCheck refuses a call without the fake's token, when it has one.
func (n *fakeNodeAPI) tokenCheck() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if n.token != "" && req.Header().Get(TestNodeTokenHeader) != n.token {
				return nil, connecterr.Encode(errors.Join(errdefs.ErrUnauthenticated, errors.New("node token required")))
			}
			return next(ctx, req)
		}
	})
}

// TestNodeTokenHeader is the header of the node token (node.TokenHeader).
const TestNodeTokenHeader = "X-Space-Node-Token"

var errUnimplemented = connect.NewError(connect.CodeUnimplemented, errors.New("not in this fake node"))

type fakeNodeExecutions struct {
	nodeapiv1connect.UnimplementedExecutionServiceHandler
	n *fakeNodeAPI
}

func (f fakeNodeExecutions) Start(_ context.Context, req *connect.Request[nodeapiv1.StartExecutionRequest]) (*connect.Response[nodeapiv1.StartExecutionResponse], error) {
	if f.n.start == nil {
		return nil, errUnimplemented
	}
	ex, err := f.n.start(nodev1.StartExecutionFromWire(req.Msg))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&nodeapiv1.StartExecutionResponse{Execution: ex.ToWire()}), nil
}

func (f fakeNodeExecutions) SetEgress(_ context.Context, req *connect.Request[nodeapiv1.SetEgressRequest]) (*connect.Response[nodeapiv1.SetEgressResponse], error) {
	if f.n.setEgress == nil {
		return nil, errUnimplemented
	}
	return connect.NewResponse(&nodeapiv1.SetEgressResponse{}), f.n.setEgress(req.Msg.GetExecId(), req.Msg.GetEgress())
}

func (f fakeNodeExecutions) Stop(_ context.Context, req *connect.Request[nodeapiv1.StopExecutionRequest]) (*connect.Response[nodeapiv1.StopExecutionResponse], error) {
	if f.n.stop == nil {
		return nil, errUnimplemented
	}
	return connect.NewResponse(&nodeapiv1.StopExecutionResponse{}), f.n.stop(req.Msg.GetExecId())
}

func (f fakeNodeExecutions) Pause(_ context.Context, req *connect.Request[nodeapiv1.PauseExecutionRequest]) (*connect.Response[nodeapiv1.PauseExecutionResponse], error) {
	if f.n.pause == nil {
		return nil, errUnimplemented
	}
	return connect.NewResponse(&nodeapiv1.PauseExecutionResponse{}), f.n.pause(req.Msg.GetExecId())
}

func (f fakeNodeExecutions) Resume(_ context.Context, req *connect.Request[nodeapiv1.ResumeExecutionRequest]) (*connect.Response[nodeapiv1.ResumeExecutionResponse], error) {
	if f.n.resume == nil {
		return nil, errUnimplemented
	}
	return connect.NewResponse(&nodeapiv1.ResumeExecutionResponse{}), f.n.resume(req.Msg.GetExecId())
}

func (f fakeNodeExecutions) TakeSnapshot(_ context.Context, req *connect.Request[nodeapiv1.TakeSnapshotRequest]) (*connect.Response[nodeapiv1.TakeSnapshotResponse], error) {
	if f.n.snapshot == nil {
		return nil, errUnimplemented
	}
	snap, err := f.n.snapshot(req.Msg.GetExecId(), nodev1.TakeSnapshot{SnapshotID: req.Msg.GetSnapshotId(), Kind: req.Msg.GetKind(), LeavePaused: req.Msg.GetLeavePaused()})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&nodeapiv1.TakeSnapshotResponse{Snapshot: snap.ToWire()}), nil
}

func (f fakeNodeExecutions) Stats(_ context.Context, req *connect.Request[nodeapiv1.ExecutionStatsRequest]) (*connect.Response[nodeapiv1.ExecutionStatsResponse], error) {
	if f.n.stats == nil {
		return nil, errUnimplemented
	}
	st, err := f.n.stats(req.Msg.GetExecId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(st.ToWire()), nil
}

type fakeNodeSnapshots struct {
	nodeapiv1connect.UnimplementedSnapshotServiceHandler
	n *fakeNodeAPI
}

func (f fakeNodeSnapshots) Delete(_ context.Context, req *connect.Request[nodeapiv1.DeleteSnapshotRequest]) (*connect.Response[nodeapiv1.DeleteSnapshotResponse], error) {
	if f.n.deleteSnapshot == nil {
		return nil, errUnimplemented
	}
	return connect.NewResponse(&nodeapiv1.DeleteSnapshotResponse{}), f.n.deleteSnapshot(req.Msg.GetSnapshotId())
}

// hostTransport sends every request with Host host.
type hostTransport struct {
	host string
	next http.RoundTripper
}

func (t hostTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Host = t.host
	return t.next.RoundTrip(r)
}
