package guestd

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/internal/failpoint"
)

// defaultKeepalive is the keepalive interval when the client names none (envd's).
const defaultKeepalive = 90 * time.Second

// processService implements process.Process with envd's semantics.
type processService struct {
	d *Daemon
}

func (s *processService) Start(ctx context.Context, req *connect.Request[processv1.StartRequest], stream *connect.ServerStream[processv1.StartResponse]) error {
	user, err := s.d.userFromHeader(req.Header())
	if err != nil {
		return rpcError(err)
	}
	if req.Msg.GetProcess() == nil {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("start: process config is missing"))
	}
	sr := spawnRequest{
		config: req.Msg.GetProcess(), tag: req.Msg.Tag, pty: req.Msg.GetPty(),
		stdin: req.Msg.Stdin == nil || req.Msg.GetStdin(), user: user,
	}
	// Connect sets the handler's deadline from Connect-Timeout-Ms (or
	// grpc-timeout); envd kills the process when it passes.
	if dl, ok := ctx.Deadline(); ok {
		sr.deadline = dl
	}
	p, sub, err := s.d.spawn(sr)
	if err != nil {
		return rpcError(err)
	}
	s.d.log.Debug("process started", "pid", p.pid, "cmd", sr.config.GetCmd(), "user", user.Name)
	failpoint.GuestAfterSpawn.Hit()
	return follow(ctx, req.Header(), p, sub, func(ev *processv1.ProcessEvent) error {
		return stream.Send(&processv1.StartResponse{Event: ev})
	})
}

func (s *processService) Connect(ctx context.Context, req *connect.Request[processv1.ConnectRequest], stream *connect.ServerStream[processv1.ConnectResponse]) error {
	p, err := s.d.procs.find(req.Msg.GetProcess())
	if err != nil {
		return rpcError(err)
	}
	sub, err := p.subscribe()
	if err != nil {
		return rpcError(err)
	}
	return follow(ctx, req.Header(), p, sub, func(ev *processv1.ProcessEvent) error {
		return stream.Send(&processv1.ConnectResponse{Event: ev})
	})
}

// follow sends start{pid}, then the process's events until its end, with
// keepalives while idle. Leaving early (client gone) leaves the process running.
func follow(ctx context.Context, h http.Header, p *process, sub *subscriber, send func(*processv1.ProcessEvent) error) error {
	defer p.unsubscribe(sub)
	start := &processv1.ProcessEvent{Event: &processv1.ProcessEvent_Start{Start: &processv1.ProcessEvent_StartEvent{Pid: uint32(p.pid)}}}
	if err := send(start); err != nil {
		return err
	}
	tick := time.NewTicker(keepaliveInterval(h))
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-sub.ch:
			if ctx.Err() != nil {
				// The deadline (or the client) ended the call: a Start's
				// process was killed by it and its end is that, not an
				// exit; when both are ready, select would pick either.
				return contextError(ctx)
			}
			if !ok {
				return nil
			}
			if ev.GetEnd() != nil {
				failpoint.GuestBeforeEnd.Hit()
			}
			if err := send(ev); err != nil {
				return err
			}
			if ev.GetEnd() != nil {
				return nil
			}
			tick.Reset(keepaliveInterval(h))
		case <-tick.C:
			ka := &processv1.ProcessEvent{Event: &processv1.ProcessEvent_Keepalive{Keepalive: &processv1.ProcessEvent_KeepAlive{}}}
			if err := send(ka); err != nil {
				return err
			}
		case <-ctx.Done():
			return contextError(ctx)
		}
	}
}

// keepaliveInterval reads Keepalive-Ping-Interval (seconds, 1..3600).
func keepaliveInterval(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval"))
	if err != nil || n < 1 || n > 3600 {
		return defaultKeepalive
	}
	return time.Duration(n) * time.Second
}

func (s *processService) List(_ context.Context, _ *connect.Request[processv1.ListRequest]) (*connect.Response[processv1.ListResponse], error) {
	resp := &processv1.ListResponse{}
	for _, p := range s.d.procs.list() {
		resp.Processes = append(resp.Processes, &processv1.ProcessInfo{Config: p.config, Pid: uint32(p.pid), Tag: p.tag})
	}
	return connect.NewResponse(resp), nil
}

func (s *processService) Update(_ context.Context, req *connect.Request[processv1.UpdateRequest]) (*connect.Response[processv1.UpdateResponse], error) {
	p, err := s.d.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, rpcError(err)
	}
	if req.Msg.GetPty() != nil {
		if p.pty == nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no PTY to resize", p.pid))
		}
		size := req.Msg.GetPty().GetSize()
		if err := resizePTY(p.pty, size.GetCols(), size.GetRows()); err != nil {
			return nil, rpcError(err)
		}
	}
	return connect.NewResponse(&processv1.UpdateResponse{}), nil
}

func (s *processService) SendInput(ctx context.Context, req *connect.Request[processv1.SendInputRequest]) (*connect.Response[processv1.SendInputResponse], error) {
	p, err := s.d.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, rpcError(err)
	}
	if err := s.d.input(ctx, p, req.Msg.GetInput()); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&processv1.SendInputResponse{}), nil
}

func (s *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[processv1.StreamInputRequest]) (*connect.Response[processv1.StreamInputResponse], error) {
	var p *process
	for stream.Receive() {
		msg := stream.Msg()
		switch ev := msg.GetEvent().(type) {
		case *processv1.StreamInputRequest_Start:
			found, err := s.d.procs.find(ev.Start.GetProcess())
			if err != nil {
				return nil, rpcError(err)
			}
			p = found
		case *processv1.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("stream input: data before start event"))
			}
			if err := s.d.input(ctx, p, ev.Data.GetInput()); err != nil {
				return nil, rpcError(err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&processv1.StreamInputResponse{}), nil
}

// input writes stdin or PTY bytes to p.
func (d *Daemon) input(ctx context.Context, p *process, in *processv1.ProcessInput) error {
	d.touch()
	switch v := in.GetInput().(type) {
	case *processv1.ProcessInput_Pty:
		if p.pty == nil {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no PTY", p.pid))
		}
		p.stdinMu.Lock()
		defer p.stdinMu.Unlock()
		return writeInput(ctx, p.pty, v.Pty)
	case *processv1.ProcessInput_Stdin:
		p.stdinMu.Lock()
		defer p.stdinMu.Unlock()
		if p.stdin == nil {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d: %w (start it with stdin: true)", p.pid, errNoStdin))
		}
		return writeInput(ctx, p.stdin, v.Stdin)
	}
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("input: want stdin or pty bytes"))
}

func (s *processService) SendSignal(_ context.Context, req *connect.Request[processv1.SendSignalRequest]) (*connect.Response[processv1.SendSignalResponse], error) {
	p, err := s.d.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, rpcError(err)
	}
	var sig unix.Signal
	switch req.Msg.GetSignal() {
	case processv1.Signal_SIGNAL_SIGTERM:
		sig = unix.SIGTERM
	case processv1.Signal_SIGNAL_SIGKILL:
		sig = unix.SIGKILL
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %v: want SIGTERM or SIGKILL", req.Msg.GetSignal()))
	}
	if err := p.signal(sig); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&processv1.SendSignalResponse{}), nil
}

func (s *processService) CloseStdin(_ context.Context, req *connect.Request[processv1.CloseStdinRequest]) (*connect.Response[processv1.CloseStdinResponse], error) {
	p, err := s.d.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, rpcError(err)
	}
	if p.pty != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has a PTY: send 0x04 instead of closing stdin", p.pid))
	}
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin != nil {
		_ = p.stdin.Close()
		p.stdin = nil
	}
	return connect.NewResponse(&processv1.CloseStdinResponse{}), nil
}
