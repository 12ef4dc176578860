package node

import (
	"context"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/internal/privop"
)

// templateService serves nodeapiv1connect.TemplateServiceHandler.
type templateService struct{ m *Manager }

// Ensure has the node-manager make the template. A caller that asked for
// progress gets the build's readings on the stream; the node-manager is
// asked for them only then.
func (s templateService) Ensure(ctx context.Context, req *connect.Request[nodeapiv1.EnsureTemplateRequest], st *connect.ServerStream[nodeapiv1.EnsureTemplateResponse]) error {
	name, source := req.Msg.GetName(), req.Msg.GetSource()
	send := progressSender(func(p *nodeapiv1.Progress) error {
		return st.Send(&nodeapiv1.EnsureTemplateResponse{Event: &nodeapiv1.EnsureTemplateResponse_Progress{Progress: p}})
	})
	var ok *privop.TemplateOK
	var err error
	if req.Msg.GetProgress() {
		ok, err = s.m.cfg.Privileged.EnsureTemplateProgress(ctx, name, source, send.report)
	} else {
		ok, err = s.m.cfg.Privileged.EnsureTemplate(ctx, name, source)
	}
	if err != nil {
		return err
	}
	ready := nodev1.TemplateReady{Name: name, SizeBytes: ok.SizeBytes}
	if ok.Progress != nil {
		p := nodev1.Progress(*ok.Progress)
		ready.Progress = &p
	}
	return send.last(func() error {
		return st.Send(&nodeapiv1.EnsureTemplateResponse{Event: &nodeapiv1.EnsureTemplateResponse_Ready{Ready: ready.ToWire()}})
	})
}

func (s templateService) List(ctx context.Context, _ *connect.Request[nodeapiv1.ListTemplatesRequest]) (*connect.Response[nodeapiv1.ListTemplatesResponse], error) {
	names, err := s.m.cfg.Privileged.Templates(ctx)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&nodeapiv1.ListTemplatesResponse{Templates: names}), nil
}

func (s templateService) Delete(ctx context.Context, req *connect.Request[nodeapiv1.DeleteTemplateRequest]) (*connect.Response[nodeapiv1.DeleteTemplateResponse], error) {
	if err := s.m.cfg.Privileged.DeleteTemplate(ctx, req.Msg.GetName()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&nodeapiv1.DeleteTemplateResponse{}), nil
}
