package node

import (
	"context"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
)

// nodeService serves nodeapiv1connect.NodeServiceHandler.
type nodeService struct{ m *Manager }

func (s nodeService) Info(ctx context.Context, _ *connect.Request[nodeapiv1.InfoRequest]) (*connect.Response[nodeapiv1.InfoResponse], error) {
	hello, err := s.m.cfg.Privileged.Hello(ctx)
	if err != nil {
		return nil, err
	}
	info := nodev1.Info{
		NodeID: s.m.cfg.NodeID, Runtimes: hello.Runtimes, Storage: hello.Storage,
		CPUs: s.m.cfg.CPUs, MemoryMiB: s.m.cfg.MemoryMiB,
	}
	return connect.NewResponse(info.ToWire()), nil
}

func (s nodeService) CollectOrphans(ctx context.Context, req *connect.Request[nodeapiv1.CollectOrphansRequest]) (*connect.Response[nodeapiv1.CollectOrphansResponse], error) {
	found, err := s.m.CollectOrphans(ctx, req.Msg.GetDryRun())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(found.ToWire()), nil
}
