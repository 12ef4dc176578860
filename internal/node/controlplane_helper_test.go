package node

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/api/node/v1/nodeapi/nodeapiv1connect"
	"github.com/spacesandbox/space/internal/connecterr"
)

// fakeControlPlane is the control plane's node-facing service in the
// node's tests: resolve answers ResolveCredential with the request's
// bearer token, heartbeat answers Heartbeat; an unset one is
// Unimplemented. Errors cross as the control plane's do (connecterr).
type fakeControlPlane struct {
	nodeapiv1connect.UnimplementedControlPlaneServiceHandler
	resolve   func(bearer, nodeID string, req nodev1.ResolveCredential) (*nodev1.ResolvedCredential, error)
	heartbeat func(bearer string, hb *nodeapiv1.Heartbeat) (*nodeapiv1.HeartbeatReply, error)
}

// serve starts the fake and returns its URL.
func (f *fakeControlPlane) serve(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(nodeapiv1connect.NewControlPlaneServiceHandler(f, connect.WithInterceptors(connecterr.Interceptor())))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(nodev1.VersionHeader, nodev1.Version)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func bearerOf(h http.Header) string {
	const p = "Bearer "
	if v := h.Get("Authorization"); len(v) > len(p) && v[:len(p)] == p {
		return v[len(p):]
	}
	return ""
}

func (f *fakeControlPlane) ResolveCredential(_ context.Context, req *connect.Request[nodeapiv1.ResolveCredentialRequest]) (*connect.Response[nodeapiv1.ResolveCredentialResponse], error) {
	if f.resolve == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("not in this fake"))
	}
	out, err := f.resolve(bearerOf(req.Header()), req.Msg.GetNodeId(), nodev1.ResolveCredentialFromWire(req.Msg))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(out.ToWire()), nil
}

func (f *fakeControlPlane) Heartbeat(_ context.Context, req *connect.Request[nodeapiv1.Heartbeat]) (*connect.Response[nodeapiv1.HeartbeatReply], error) {
	if f.heartbeat == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("not in this fake"))
	}
	out, err := f.heartbeat(bearerOf(req.Header()), req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(out), nil
}
