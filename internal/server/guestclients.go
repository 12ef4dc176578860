package server

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
	"github.com/spacesandbox/space/api/guest/v1/filesystem/filesystemv1connect"
	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/api/guest/v1/process/processv1connect"
)

// The guest protocol's Connect clients, made once. A Connect client is a
// table of its service's procedures with their codecs and options: making
// both for every guest request cost ~20 µs and 359 allocations
// (BenchmarkGuestFor), 7.6 % of the server's CPU per exec. Each call goes
// through the HTTP client of the Guest it was made on (its routeTransport:
// the route and capability of that sandbox and operation), which
// routedProcess and routedFiles put in the call's context.
var (
	sharedProcess = processv1connect.NewProcessClient(contextHTTP{}, guestBase, guestClientOptions...)
	sharedFiles   = filesystemv1connect.NewFilesystemClient(contextHTTP{}, guestBase, guestClientOptions...)
)

type guestHTTPKey struct{}

// contextHTTP sends a request with the HTTP client its context carries.
type contextHTTP struct{}

func (contextHTTP) Do(req *http.Request) (*http.Response, error) {
	hc, ok := req.Context().Value(guestHTTPKey{}).(*http.Client)
	if !ok {
		return nil, errors.New("guest request without its sandbox's route (made outside routedProcess or routedFiles)")
	}
	return hc.Do(req)
}

func withGuestHTTP(ctx context.Context, hc *http.Client) context.Context {
	return context.WithValue(ctx, guestHTTPKey{}, hc)
}

// routedProcess is the process service of one Guest: sharedProcess over hc.
type routedProcess struct{ hc *http.Client }

var _ processv1connect.ProcessClient = routedProcess{}

func (p routedProcess) List(ctx context.Context, r *connect.Request[processv1.ListRequest]) (*connect.Response[processv1.ListResponse], error) {
	return sharedProcess.List(withGuestHTTP(ctx, p.hc), r)
}

func (p routedProcess) Connect(ctx context.Context, r *connect.Request[processv1.ConnectRequest]) (*connect.ServerStreamForClient[processv1.ConnectResponse], error) {
	return sharedProcess.Connect(withGuestHTTP(ctx, p.hc), r)
}

func (p routedProcess) Start(ctx context.Context, r *connect.Request[processv1.StartRequest]) (*connect.ServerStreamForClient[processv1.StartResponse], error) {
	return sharedProcess.Start(withGuestHTTP(ctx, p.hc), r)
}

func (p routedProcess) Update(ctx context.Context, r *connect.Request[processv1.UpdateRequest]) (*connect.Response[processv1.UpdateResponse], error) {
	return sharedProcess.Update(withGuestHTTP(ctx, p.hc), r)
}

func (p routedProcess) StreamInput(ctx context.Context) *connect.ClientStreamForClient[processv1.StreamInputRequest, processv1.StreamInputResponse] {
	return sharedProcess.StreamInput(withGuestHTTP(ctx, p.hc))
}

func (p routedProcess) SendInput(ctx context.Context, r *connect.Request[processv1.SendInputRequest]) (*connect.Response[processv1.SendInputResponse], error) {
	return sharedProcess.SendInput(withGuestHTTP(ctx, p.hc), r)
}

func (p routedProcess) SendSignal(ctx context.Context, r *connect.Request[processv1.SendSignalRequest]) (*connect.Response[processv1.SendSignalResponse], error) {
	return sharedProcess.SendSignal(withGuestHTTP(ctx, p.hc), r)
}

func (p routedProcess) CloseStdin(ctx context.Context, r *connect.Request[processv1.CloseStdinRequest]) (*connect.Response[processv1.CloseStdinResponse], error) {
	return sharedProcess.CloseStdin(withGuestHTTP(ctx, p.hc), r)
}

// routedFiles is the filesystem service of one Guest: sharedFiles over hc.
type routedFiles struct{ hc *http.Client }

var _ filesystemv1connect.FilesystemClient = routedFiles{}

func (f routedFiles) Stat(ctx context.Context, r *connect.Request[filesystemv1.StatRequest]) (*connect.Response[filesystemv1.StatResponse], error) {
	return sharedFiles.Stat(withGuestHTTP(ctx, f.hc), r)
}

func (f routedFiles) MakeDir(ctx context.Context, r *connect.Request[filesystemv1.MakeDirRequest]) (*connect.Response[filesystemv1.MakeDirResponse], error) {
	return sharedFiles.MakeDir(withGuestHTTP(ctx, f.hc), r)
}

func (f routedFiles) Move(ctx context.Context, r *connect.Request[filesystemv1.MoveRequest]) (*connect.Response[filesystemv1.MoveResponse], error) {
	return sharedFiles.Move(withGuestHTTP(ctx, f.hc), r)
}

func (f routedFiles) ListDir(ctx context.Context, r *connect.Request[filesystemv1.ListDirRequest]) (*connect.Response[filesystemv1.ListDirResponse], error) {
	return sharedFiles.ListDir(withGuestHTTP(ctx, f.hc), r)
}

func (f routedFiles) Remove(ctx context.Context, r *connect.Request[filesystemv1.RemoveRequest]) (*connect.Response[filesystemv1.RemoveResponse], error) {
	return sharedFiles.Remove(withGuestHTTP(ctx, f.hc), r)
}

func (f routedFiles) WatchDir(ctx context.Context, r *connect.Request[filesystemv1.WatchDirRequest]) (*connect.ServerStreamForClient[filesystemv1.WatchDirResponse], error) {
	return sharedFiles.WatchDir(withGuestHTTP(ctx, f.hc), r)
}

func (f routedFiles) CreateWatcher(ctx context.Context, r *connect.Request[filesystemv1.CreateWatcherRequest]) (*connect.Response[filesystemv1.CreateWatcherResponse], error) {
	return sharedFiles.CreateWatcher(withGuestHTTP(ctx, f.hc), r)
}

func (f routedFiles) GetWatcherEvents(ctx context.Context, r *connect.Request[filesystemv1.GetWatcherEventsRequest]) (*connect.Response[filesystemv1.GetWatcherEventsResponse], error) {
	return sharedFiles.GetWatcherEvents(withGuestHTTP(ctx, f.hc), r)
}

func (f routedFiles) RemoveWatcher(ctx context.Context, r *connect.Request[filesystemv1.RemoveWatcherRequest]) (*connect.Response[filesystemv1.RemoveWatcherResponse], error) {
	return sharedFiles.RemoveWatcher(withGuestHTTP(ctx, f.hc), r)
}
