package node

import (
	"context"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
)

// executionService serves nodeapiv1connect.ExecutionServiceHandler.
type executionService struct{ m *Manager }

func (s executionService) List(ctx context.Context, req *connect.Request[nodeapiv1.ListExecutionsRequest]) (*connect.Response[nodeapiv1.ListExecutionsResponse], error) {
	execs := s.m.List
	if id := req.Msg.GetSandboxId(); id != "" {
		execs = func(ctx context.Context) []nodev1.Execution { return s.m.ListSandbox(ctx, id) }
	}
	return connect.NewResponse(&nodeapiv1.ListExecutionsResponse{Executions: nodev1.ExecutionsToWire(execs(ctx))}), nil
}

func (s executionService) Start(ctx context.Context, req *connect.Request[nodeapiv1.StartExecutionRequest]) (*connect.Response[nodeapiv1.StartExecutionResponse], error) {
	ex, err := s.m.Start(ctx, nodev1.StartExecutionFromWire(req.Msg))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&nodeapiv1.StartExecutionResponse{Execution: ex.ToWire()}), nil
}

func (s executionService) Get(ctx context.Context, req *connect.Request[nodeapiv1.GetExecutionRequest]) (*connect.Response[nodeapiv1.GetExecutionResponse], error) {
	ex, err := s.m.Get(ctx, req.Msg.GetExecId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&nodeapiv1.GetExecutionResponse{Execution: ex.ToWire()}), nil
}

func (s executionService) Stop(ctx context.Context, req *connect.Request[nodeapiv1.StopExecutionRequest]) (*connect.Response[nodeapiv1.StopExecutionResponse], error) {
	if err := s.m.Stop(ctx, req.Msg.GetExecId()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&nodeapiv1.StopExecutionResponse{}), nil
}

func (s executionService) Pause(ctx context.Context, req *connect.Request[nodeapiv1.PauseExecutionRequest]) (*connect.Response[nodeapiv1.PauseExecutionResponse], error) {
	if err := s.m.PauseResume(ctx, req.Msg.GetExecId(), true); err != nil {
		return nil, err
	}
	return connect.NewResponse(&nodeapiv1.PauseExecutionResponse{}), nil
}

func (s executionService) Resume(ctx context.Context, req *connect.Request[nodeapiv1.ResumeExecutionRequest]) (*connect.Response[nodeapiv1.ResumeExecutionResponse], error) {
	if err := s.m.PauseResume(ctx, req.Msg.GetExecId(), false); err != nil {
		return nil, err
	}
	return connect.NewResponse(&nodeapiv1.ResumeExecutionResponse{}), nil
}

func (s executionService) SetEgress(_ context.Context, req *connect.Request[nodeapiv1.SetEgressRequest]) (*connect.Response[nodeapiv1.SetEgressResponse], error) {
	if err := s.m.SetEgress(req.Msg.GetExecId(), req.Msg.GetEgress()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&nodeapiv1.SetEgressResponse{}), nil
}

func (s executionService) Stats(ctx context.Context, req *connect.Request[nodeapiv1.ExecutionStatsRequest]) (*connect.Response[nodeapiv1.ExecutionStatsResponse], error) {
	st, err := s.m.Stats(ctx, req.Msg.GetExecId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(st.ToWire()), nil
}

func (s executionService) TakeSnapshot(ctx context.Context, req *connect.Request[nodeapiv1.TakeSnapshotRequest]) (*connect.Response[nodeapiv1.TakeSnapshotResponse], error) {
	snap, err := s.m.Snapshot(ctx, req.Msg.GetExecId(), nodev1.TakeSnapshot{
		SnapshotID: req.Msg.GetSnapshotId(), Kind: req.Msg.GetKind(), LeavePaused: req.Msg.GetLeavePaused(),
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&nodeapiv1.TakeSnapshotResponse{Snapshot: snap.ToWire()}), nil
}
