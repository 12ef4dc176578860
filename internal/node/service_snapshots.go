package node

import (
	"context"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/internal/progress"
)

// snapshotService serves nodeapiv1connect.SnapshotServiceHandler.
type snapshotService struct{ m *Manager }

func (s snapshotService) List(ctx context.Context, _ *connect.Request[nodeapiv1.ListSnapshotsRequest]) (*connect.Response[nodeapiv1.ListSnapshotsResponse], error) {
	snaps, err := s.m.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	out := &nodeapiv1.ListSnapshotsResponse{}
	for _, snap := range snaps {
		out.Snapshots = append(out.Snapshots, snap.ToWire())
	}
	return connect.NewResponse(out), nil
}

func (s snapshotService) Delete(ctx context.Context, req *connect.Request[nodeapiv1.DeleteSnapshotRequest]) (*connect.Response[nodeapiv1.DeleteSnapshotResponse], error) {
	if err := s.m.DeleteSnapshot(ctx, req.Msg.GetSnapshotId()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&nodeapiv1.DeleteSnapshotResponse{}), nil
}

func (s snapshotService) Upload(ctx context.Context, req *connect.Request[nodeapiv1.UploadSnapshotRequest], st *connect.ServerStream[nodeapiv1.UploadSnapshotResponse]) error {
	send := progressSender(func(p *nodeapiv1.Progress) error {
		return st.Send(&nodeapiv1.UploadSnapshotResponse{Event: &nodeapiv1.UploadSnapshotResponse_Progress{Progress: p}})
	})
	m := req.Msg
	a, err := s.m.Upload(ctx, m.GetSnapshotId(), nodev1.UploadSnapshot{
		Tenant: m.GetTenant(), Prefix: m.GetPrefix(), SharedPrefix: m.GetSharedPrefix(), KeyID: m.GetKeyId(),
	}, send.report)
	if err != nil {
		return err
	}
	return send.last(func() error {
		return st.Send(&nodeapiv1.UploadSnapshotResponse{Event: &nodeapiv1.UploadSnapshotResponse_Artifacts{Artifacts: a.ToWire()}})
	})
}

func (s snapshotService) Download(ctx context.Context, req *connect.Request[nodeapiv1.DownloadSnapshotRequest], st *connect.ServerStream[nodeapiv1.DownloadSnapshotResponse]) error {
	send := progressSender(func(p *nodeapiv1.Progress) error {
		return st.Send(&nodeapiv1.DownloadSnapshotResponse{Event: &nodeapiv1.DownloadSnapshotResponse_Progress{Progress: p}})
	})
	m := req.Msg
	snap, err := s.m.Download(ctx, m.GetSnapshotId(), nodev1.DownloadSnapshot{
		Tenant: m.GetTenant(), Artifacts: nodev1.ArtifactsFromWire(m.GetArtifacts()),
	}, send.report)
	if err != nil {
		return err
	}
	return send.last(func() error {
		return st.Send(&nodeapiv1.DownloadSnapshotResponse{Event: &nodeapiv1.DownloadSnapshotResponse_Snapshot{Snapshot: snap.ToWire()}})
	})
}

// progressSender makes the sender of a long operation's readings on its
// stream.
func progressSender(send func(*nodeapiv1.Progress) error) *progressStream {
	return &progressStream{send: send}
}

// report sends one reading (a Reporter). A caller that went away makes the
// send fail, which the operation does not notice: its context ends it.
func (s *progressStream) report(r progress.Report) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.send(nodev1.Progress(r).ToWire())
}

// last sends the result, after every reading.
func (s *progressStream) last(send func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return send()
}
