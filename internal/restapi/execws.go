package restapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

// maxWSMessage bounds one WebSocket message from a client (stdin chunks).
const maxWSMessage = 1 << 20

// handleExecStream runs a command with its input and output streamed over a
// WebSocket (protocol in sandboxv1.ExecMessage).
func (a *API) handleExecStream(w http.ResponseWriter, r *http.Request) {
	sb, err := a.sandboxFor(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	// The slot is taken before the upgrade: a refusal is a plain 429
	// too_many_streams the client reads, not a WebSocket that closes.
	g, release, err := a.execGuest(r, sb)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	defer release()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{ExecSubprotocol}})
	if err != nil {
		return // Accept has answered the client.
	}
	ws.SetReadLimit(maxWSMessage)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if err := a.streamExec(ctx, cancel, ws, g); err != nil {
		_ = writeWS(ctx, ws, sandboxv1.ExecMessage{Type: "error", Message: err.Error()})
		ws.Close(websocket.StatusPolicyViolation, truncate(err.Error(), 120))
		return
	}
	ws.Close(websocket.StatusNormalClosure, "")
}

// streamExec runs the session; cancel ends it. The request's context is not
// cancelled when the client of a hijacked connection leaves, so the input
// reader cancels when the WebSocket fails: a command that prints nothing
// would otherwise hold the session, its stream slot and its process until it
// ended by itself.
func (a *API) streamExec(ctx context.Context, cancel context.CancelFunc, ws *websocket.Conn, g *Guest) error {
	startCtx, done := context.WithTimeout(ctx, 30*time.Second)
	var st sandboxv1.ExecStart
	err := readWS(startCtx, ws, &st)
	done()
	if err != nil {
		return fmt.Errorf("first message must be the exec start: %w", err)
	}
	if err := validateCmd(st.Cmd, st.Env, st.Cwd); err != nil {
		return err
	}
	yes := true
	req := &processv1.StartRequest{Process: processConfig(st.Cmd, st.Env, st.Cwd), Stdin: &yes}
	if st.TTY {
		req.Pty = &processv1.PTY{Size: &processv1.PTY_Size{Cols: orDefault(st.Cols, 80), Rows: orDefault(st.Rows, 24)}}
	}
	stream, err := g.Process.Start(ctx, asUser(connect.NewRequest(req), st.User))
	if err != nil {
		return GuestError("exec", err)
	}
	defer stream.Close()

	var pid uint32
	exited := false
	inputDone := make(chan struct{})
	defer func() {
		if pid != 0 && !exited {
			// The client went away before the command ended: do not leave it
			// running unattended.
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			sel := &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Pid{Pid: pid}}
			_, _ = g.Process.SendSignal(kctx, connect.NewRequest(&processv1.SendSignalRequest{Process: sel, Signal: processv1.Signal_SIGNAL_SIGKILL}))
		}
	}()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		var out sandboxv1.ExecMessage
		switch {
		case ev.GetStart() != nil:
			pid = ev.GetStart().GetPid()
			go func() {
				defer close(inputDone)
				defer cancel() // the client is gone: end the session
				forwardInput(ctx, ws, g, pid, st.TTY)
			}()
			out = sandboxv1.ExecMessage{Type: "started", Pid: pid}
		case ev.GetData() != nil:
			d := ev.GetData()
			switch {
			case d.GetStdout() != nil:
				out = sandboxv1.ExecMessage{Type: "stdout", Data: d.GetStdout()}
			case d.GetPty() != nil:
				out = sandboxv1.ExecMessage{Type: "stdout", Data: d.GetPty()}
			case d.GetStderr() != nil:
				out = sandboxv1.ExecMessage{Type: "stderr", Data: d.GetStderr()}
			default:
				continue
			}
		case ev.GetEnd() != nil:
			exited = true
			code := int(ev.GetEnd().GetExitCode())
			out = sandboxv1.ExecMessage{Type: "exit", ExitCode: &code, Message: ev.GetEnd().GetStatus()}
		default:
			continue
		}
		if err := writeWS(ctx, ws, out); err != nil {
			return nil // the client is gone
		}
	}
	if err := stream.Err(); err != nil && !exited {
		if connect.CodeOf(err) == connect.CodeNotFound {
			code := exitNotFound
			_ = writeWS(ctx, ws, sandboxv1.ExecMessage{Type: "stderr", Data: []byte(notFoundMessage(err) + "\n")})
			_ = writeWS(ctx, ws, sandboxv1.ExecMessage{Type: "exit", ExitCode: &code})
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if pid != 0 {
			return fmt.Errorf("%w: exec: lost the connection to the sandbox while the command ran: %v", errdefs.ErrUnavailable, err)
		}
		return GuestError("exec", err)
	}
	if !exited {
		return fmt.Errorf("%w: exec: the sandbox ended the stream without an exit status", errdefs.ErrUnavailable)
	}
	return nil
}

// forwardInput relays the client's stdin, signals and resizes to the process
// until the WebSocket closes.
func forwardInput(ctx context.Context, ws *websocket.Conn, g *Guest, pid uint32, tty bool) {
	sel := &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Pid{Pid: pid}}
	for {
		var m sandboxv1.ExecMessage
		if err := readWS(ctx, ws, &m); err != nil {
			return
		}
		var err error
		switch m.Type {
		case "stdin":
			in := &processv1.ProcessInput{Input: &processv1.ProcessInput_Stdin{Stdin: m.Data}}
			if tty {
				in = &processv1.ProcessInput{Input: &processv1.ProcessInput_Pty{Pty: m.Data}}
			}
			_, err = g.Process.SendInput(ctx, connect.NewRequest(&processv1.SendInputRequest{Process: sel, Input: in}))
		case "close_stdin":
			if tty {
				in := &processv1.ProcessInput{Input: &processv1.ProcessInput_Pty{Pty: []byte{4}}}
				_, err = g.Process.SendInput(ctx, connect.NewRequest(&processv1.SendInputRequest{Process: sel, Input: in}))
			} else {
				_, err = g.Process.CloseStdin(ctx, connect.NewRequest(&processv1.CloseStdinRequest{Process: sel}))
			}
		case "signal":
			sig, ok := guestSignal(m.Signal)
			if !ok {
				err = fmt.Errorf("%w: signal %d cannot be sent; use 15 (TERM) or 9 (KILL)", errdefs.ErrInvalidArgument, m.Signal)
				break
			}
			_, err = g.Process.SendSignal(ctx, connect.NewRequest(&processv1.SendSignalRequest{Process: sel, Signal: sig}))
		case "resize":
			pty := &processv1.PTY{Size: &processv1.PTY_Size{Cols: orDefault(m.Cols, 80), Rows: orDefault(m.Rows, 24)}}
			_, err = g.Process.Update(ctx, connect.NewRequest(&processv1.UpdateRequest{Process: sel, Pty: pty}))
		default:
			err = fmt.Errorf("%w: unknown message type %q", errdefs.ErrInvalidArgument, m.Type)
		}
		if err != nil && ctx.Err() == nil {
			// Input to a process that just ended is not worth a message.
			if connect.CodeOf(err) == connect.CodeNotFound {
				continue
			}
			_ = writeWS(ctx, ws, sandboxv1.ExecMessage{Type: "error", Message: err.Error()})
		}
	}
}

func guestSignal(n int) (processv1.Signal, bool) {
	switch n {
	case 15:
		return processv1.Signal_SIGNAL_SIGTERM, true
	case 9:
		return processv1.Signal_SIGNAL_SIGKILL, true
	}
	return 0, false
}

func orDefault(v, d uint32) uint32 {
	if v == 0 || v > 10000 {
		return d
	}
	return v
}

func readWS(ctx context.Context, ws *websocket.Conn, v any) error {
	typ, b, err := ws.Read(ctx)
	if err != nil {
		return err
	}
	if typ != websocket.MessageText {
		return errors.New("want text messages with JSON")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("bad JSON: %w", err)
	}
	return nil
}

func writeWS(ctx context.Context, ws *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return ws.Write(ctx, websocket.MessageText, b)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
