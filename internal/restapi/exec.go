package restapi

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

const (
	// maxCapture bounds what a run-to-completion exec keeps of each of stdout
	// and stderr; the rest is dropped and the result marked truncated.
	maxCapture = 16 << 20
	// defaultExecTimeout applies when a run-to-completion exec names none.
	defaultExecTimeout = 60 * time.Second
	// maxExecTimeout bounds a run-to-completion exec; longer work streams.
	maxExecTimeout = 24 * time.Hour
	// exitNotFound is the shell's exit code for a command that does not exist.
	exitNotFound = 127
)

func (a *API) handleExec(w http.ResponseWriter, r *http.Request) {
	sb, err := a.sandboxFor(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	var req sandboxv1.ExecRequest
	if err := decodeJSON(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	if err := validateCmd(req.Cmd, req.Env, req.Cwd); err != nil {
		a.writeError(w, r, err)
		return
	}
	timeout := defaultExecTimeout
	if req.Timeout != "" {
		timeout, err = time.ParseDuration(req.Timeout)
		if err != nil || timeout <= 0 || timeout > maxExecTimeout {
			a.writeError(w, r, fmt.Errorf("%w: timeout %q: want a Go duration between 0 and %s", errdefs.ErrInvalidArgument, req.Timeout, maxExecTimeout))
			return
		}
	}
	g, release, err := a.execGuest(r, sb)
	if err != nil {
		a.writeError(w, r, a.overtaken(r, sb, err))
		return
	}
	defer release()
	start := time.Now()
	res, err := runToCompletion(r.Context(), g, &req, timeout)
	a.host.ObserveExec(time.Since(start))
	if err != nil {
		a.writeError(w, r, a.overtaken(r, sb, err))
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// handleListProcesses lists the processes the guest daemon started in the
// sandbox — the execs, terminals and code kernels E2B's commands.list sees
// (process.Process/List, the call the /e2b surface forwards) — by pid. It
// takes the exec's authorization: whoever may run a command may see what
// runs. A process's environment is left out of the answer.
func (a *API) handleListProcesses(w http.ResponseWriter, r *http.Request) {
	sb, err := a.sandboxFor(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	g, release, err := a.execGuest(r, sb)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	defer release()
	resp, err := g.Process.List(r.Context(), connect.NewRequest(&processv1.ListRequest{}))
	if err != nil {
		a.writeError(w, r, a.overtaken(r, sb, GuestError("list processes", err)))
		return
	}
	out := sandboxv1.ProcessList{Processes: []sandboxv1.Process{}}
	for _, p := range resp.Msg.GetProcesses() {
		c := p.GetConfig()
		args := c.GetArgs()
		if args == nil {
			args = []string{}
		}
		out.Processes = append(out.Processes, sandboxv1.Process{PID: p.GetPid(), Cmd: c.GetCmd(), Args: args, Cwd: c.GetCwd(), Tag: p.GetTag()})
	}
	slices.SortFunc(out.Processes, func(x, y sandboxv1.Process) int { return cmp.Compare(x.PID, y.PID) })
	writeJSON(w, http.StatusOK, out)
}

// execGuest takes one of the sandbox's stream slots (a refusal is 429
// too_many_streams) and reaches its guest with exec's authorization; the
// caller releases the slot when done. The slot is taken first, so a
// refused stream never reaches the guest.
func (a *API) execGuest(r *http.Request, sb *sandbox.Sandbox) (*Guest, func(), error) {
	release, err := a.host.OpenStream(sb)
	if err != nil {
		return nil, nil, err
	}
	g, err := a.host.Guest(r.Context(), sb, capability.OpExec)
	if err != nil {
		release()
		return nil, nil, err
	}
	return g, release, nil
}

// overtaken is the answer to an exec whose guest channel failed: when a
// lifecycle operation moved the sandbox under it (a pause, hibernate, stop,
// rollback or delete accepted while the exec started or ran), a conflict
// naming the state the sandbox is in now, or NotFound once it is deleted —
// the loser of the race told why, not what the cut channel looked like
// (a 503, or a 400 for the stream's "incomplete envelope"). While the
// sandbox still runs the same execution, err is the answer as it was.
func (a *API) overtaken(r *http.Request, was *sandbox.Sandbox, err error) error {
	if was.State != sandbox.StateRunning {
		return err // refused for the state it was in, which err names
	}
	cur, gerr := a.svc.Get(r.Context(), a.caller(r), was.ID)
	switch {
	case errors.Is(gerr, errdefs.ErrNotFound):
		return fmt.Errorf("%w: sandbox %s was deleted while the command started or ran", errdefs.ErrNotFound, was.ID)
	case gerr != nil || cur.State == sandbox.StateRunning && cur.Generation == was.Generation:
		return err
	}
	return fmt.Errorf("%w: sandbox %s is %s now (generation %d): the command was cut or never started (%v)",
		errdefs.ErrConflict, was.ID, cur.State, cur.Generation, err)
}

// runToCompletion starts a command, feeds it req.Stdin, and collects its output
// until it exits or the timeout kills it.
func runToCompletion(ctx context.Context, g *Guest, req *sandboxv1.ExecRequest, timeout time.Duration) (*sandboxv1.ExecResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wantStdin := req.Stdin != ""
	start := &processv1.StartRequest{
		Process: processConfig(req.Cmd, req.Env, req.Cwd),
		Stdin:   &wantStdin,
	}
	stream, err := g.Process.Start(ctx, asUser(connect.NewRequest(start), req.User))
	if err != nil {
		return nil, GuestError("exec", err)
	}
	defer stream.Close()
	var stdout, stderr capture
	res := &sandboxv1.ExecResult{}
	started, ended, exited := false, false, false
	var pid uint32
	defer func() {
		if pid != 0 && !ended {
			// The client went away (or the stream broke) before the command
			// ended: do not leave it running unattended, as a streaming exec
			// does not (execws.go).
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			sel := &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Pid{Pid: pid}}
			_, _ = g.Process.SendSignal(kctx, connect.NewRequest(&processv1.SendSignalRequest{Process: sel, Signal: processv1.Signal_SIGNAL_SIGKILL}))
		}
	}()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			started = true
			pid = ev.GetStart().GetPid()
			if wantStdin {
				if err := sendStdinAndClose(ctx, g, ev.GetStart().GetPid(), []byte(req.Stdin)); err != nil {
					return nil, err
				}
			}
		case ev.GetData() != nil:
			d := ev.GetData()
			stdout.write(d.GetStdout())
			stderr.write(d.GetStderr())
			stdout.write(d.GetPty())
		case ev.GetEnd() != nil:
			ended, exited = true, ev.GetEnd().GetExited()
			res.ExitCode = int(ev.GetEnd().GetExitCode())
			if !ev.GetEnd().GetExited() && res.ExitCode == 0 {
				res.ExitCode = -1
			}
		}
	}
	streamErr := stream.Err()
	if timedOut(ctx.Err(), streamErr, ended, exited) {
		return nil, fmt.Errorf("%w: exec: command did not finish within %s and was killed", errdefs.ErrUnavailable, timeout)
	}
	// A stream that breaks after the command's end (its host bridge killed
	// once the answer was through) still has the whole answer: the end
	// comes after all the output.
	if err := streamErr; err != nil && !ended {
		if connect.CodeOf(err) == connect.CodeNotFound {
			return &sandboxv1.ExecResult{ExitCode: exitNotFound, Stderr: notFoundMessage(err) + "\n"}, nil
		}
		if started {
			// The command ran and its stream broke: the sandbox or the path
			// to it went away, whatever the transport calls it.
			return nil, fmt.Errorf("%w: exec: lost the connection to the sandbox while the command ran: %v", errdefs.ErrUnavailable, err)
		}
		return nil, GuestError("exec", err)
	}
	if !ended {
		return nil, fmt.Errorf("%w: exec: the sandbox ended the stream without an exit status", errdefs.ErrUnavailable)
	}
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	res.Truncated = stdout.truncated || stderr.truncated
	return res, nil
}

// timedOut reports whether a run-to-completion exec ended because its
// timeout passed: its context's deadline did; or a hop ahead answered with
// the deadline first (the deadline travels with the request, so the far
// end can give up a moment before this end's timer fires); or the command
// ended killed once the deadline had passed (cancelling the stream is what
// kills it, and its end can arrive before the stream's error).
func timedOut(ctxErr, streamErr error, ended, exited bool) bool {
	deadline := errors.Is(ctxErr, context.DeadlineExceeded)
	switch {
	case ended:
		return !exited && deadline
	case streamErr != nil:
		return deadline || connect.CodeOf(streamErr) == connect.CodeDeadlineExceeded
	}
	return false
}

func notFoundMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

func sendStdinAndClose(ctx context.Context, g *Guest, pid uint32, data []byte) error {
	sel := &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Pid{Pid: pid}}
	const chunk = 1 << 20
	for len(data) > 0 {
		n := min(len(data), chunk)
		in := &processv1.SendInputRequest{Process: sel, Input: &processv1.ProcessInput{Input: &processv1.ProcessInput_Stdin{Stdin: data[:n]}}}
		if _, err := g.Process.SendInput(ctx, connect.NewRequest(in)); err != nil {
			return GuestError("exec: stdin", err)
		}
		data = data[n:]
	}
	if _, err := g.Process.CloseStdin(ctx, connect.NewRequest(&processv1.CloseStdinRequest{Process: sel})); err != nil {
		return GuestError("exec: close stdin", err)
	}
	return nil
}

func processConfig(cmd []string, env map[string]string, cwd string) *processv1.ProcessConfig {
	pc := &processv1.ProcessConfig{Cmd: cmd[0], Args: cmd[1:], Envs: env}
	if cwd != "" {
		pc.Cwd = &cwd
	}
	return pc
}

// validateCmd checks an exec request's command, env and cwd.
func validateCmd(cmd []string, env map[string]string, cwd string) error {
	if len(cmd) == 0 || cmd[0] == "" {
		return fmt.Errorf("%w: cmd must name a program", errdefs.ErrInvalidArgument)
	}
	total := 0
	for _, a := range cmd {
		if bytes.IndexByte([]byte(a), 0) >= 0 {
			return fmt.Errorf("%w: cmd arguments must not contain NUL bytes", errdefs.ErrInvalidArgument)
		}
		total += len(a)
	}
	for k, v := range env {
		if k == "" || bytes.ContainsAny([]byte(k), "=\x00") || bytes.IndexByte([]byte(v), 0) >= 0 {
			return fmt.Errorf("%w: env %q: keys must be non-empty without '=' or NUL, values without NUL", errdefs.ErrInvalidArgument, k)
		}
		total += len(k) + len(v)
	}
	if bytes.IndexByte([]byte(cwd), 0) >= 0 {
		return fmt.Errorf("%w: cwd must not contain NUL bytes", errdefs.ErrInvalidArgument)
	}
	if total > 1<<20 {
		return fmt.Errorf("%w: cmd and env together are over 1 MiB", errdefs.ErrInvalidArgument)
	}
	return nil
}

// capture keeps the first maxCapture bytes written to it.
type capture struct {
	buf       bytes.Buffer
	truncated bool
}

func (c *capture) write(p []byte) {
	room := maxCapture - c.buf.Len()
	if len(p) > room {
		p, c.truncated = p[:max(room, 0)], true
	}
	c.buf.Write(p)
}

func (c *capture) String() string { return c.buf.String() }
