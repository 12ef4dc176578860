package guestd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/internal/guest"
	"github.com/spacesandbox/space/internal/guestd"
)

func TestExecOutputAndExitCode(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	res := run(t, c, sh("echo out; echo err >&2; exit 3"), "")
	if res.pid == 0 {
		t.Errorf("start pid = 0, want the process's pid")
	}
	if got := res.stdout.String(); got != "out\n" {
		t.Errorf("stdout = %q, want %q", got, "out\n")
	}
	if got := res.stderr.String(); got != "err\n" {
		t.Errorf("stderr = %q, want %q", got, "err\n")
	}
	if res.end.GetExitCode() != 3 || !res.end.GetExited() || res.end.GetStatus() != "exit status 3" {
		t.Errorf("end = %v, want exit code 3, exited, status \"exit status 3\"", res.end)
	}
}

func TestExecLargeOutput(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	res := run(t, c, sh("head -c 5000000 /dev/zero"), "")
	if res.stdout.Len() != 5000000 {
		t.Errorf("stdout length = %d, want 5000000", res.stdout.Len())
	}
}

func TestExecBadCommand(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	tests := []struct {
		name string
		cmd  string
		cwd  *string
		want connect.Code
	}{
		{"missing absolute", "/nonexistent/command", nil, connect.CodeNotFound},
		{"missing in PATH", "no-such-command-space", nil, connect.CodeNotFound},
		{"empty", "", nil, connect.CodeInvalidArgument},
		{"NUL byte", "sh\x00x", nil, connect.CodeInvalidArgument},
		{"directory", "/tmp", nil, connect.CodeInvalidArgument},
		{"missing cwd", "true", ptr("/nonexistent-dir"), connect.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream, err := c.Process().Start(testCtx(t), connect.NewRequest(&processv1.StartRequest{
				Process: &processv1.ProcessConfig{Cmd: tt.cmd, Cwd: tt.cwd},
			}))
			if err == nil {
				_, err = collect(t, stream)
			}
			wantCode(t, err, tt.want)
		})
	}
}

func TestStdinAndCloseStdin(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	ctx := testCtx(t)
	stream, err := c.Process().Start(ctx, connect.NewRequest(&processv1.StartRequest{
		Process: &processv1.ProcessConfig{Cmd: "cat"}, // stdin unset: on, as envd
	}))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if !stream.Receive() {
		t.Fatalf("no start event: %v", stream.Err())
	}
	sel := &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Pid{Pid: stream.Msg().GetEvent().GetStart().GetPid()}}
	if _, err := c.Process().SendInput(ctx, connect.NewRequest(&processv1.SendInputRequest{
		Process: sel, Input: &processv1.ProcessInput{Input: &processv1.ProcessInput_Stdin{Stdin: []byte("hello ")}},
	})); err != nil {
		t.Fatalf("SendInput: %v", err)
	}
	in := c.Process().StreamInput(ctx)
	in.Send(&processv1.StreamInputRequest{Event: &processv1.StreamInputRequest_Start{Start: &processv1.StreamInputRequest_StartEvent{Process: sel}}})
	in.Send(&processv1.StreamInputRequest{Event: &processv1.StreamInputRequest_Data{Data: &processv1.StreamInputRequest_DataEvent{
		Input: &processv1.ProcessInput{Input: &processv1.ProcessInput_Stdin{Stdin: []byte("world")}}}}})
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatalf("StreamInput: %v", err)
	}
	if _, err := c.Process().CloseStdin(ctx, connect.NewRequest(&processv1.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	var out strings.Builder
	var end *processv1.ProcessEvent_EndEvent
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		if ev.GetEnd() != nil {
			end = ev.GetEnd()
		}
	}
	if out.String() != "hello world" || end.GetExitCode() != 0 || !end.GetExited() {
		t.Errorf("cat output %q end %v, want %q and exit 0", out.String(), end, "hello world")
	}
}

func TestSignals(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	for _, tt := range []struct {
		sig    processv1.Signal
		status string
	}{
		{processv1.Signal_SIGNAL_SIGTERM, "signal: terminated"},
		{processv1.Signal_SIGNAL_SIGKILL, "signal: killed"},
	} {
		t.Run(tt.sig.String(), func(t *testing.T) {
			ctx := testCtx(t)
			stream, err := c.Process().Start(ctx, connect.NewRequest(sh("exec sleep 100")))
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			if !stream.Receive() {
				t.Fatalf("no start event: %v", stream.Err())
			}
			pid := stream.Msg().GetEvent().GetStart().GetPid()
			if _, err := c.Process().SendSignal(ctx, connect.NewRequest(&processv1.SendSignalRequest{
				Process: &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Pid{Pid: pid}}, Signal: tt.sig,
			})); err != nil {
				t.Fatalf("SendSignal: %v", err)
			}
			var end *processv1.ProcessEvent_EndEvent
			for stream.Receive() {
				if e := stream.Msg().GetEvent().GetEnd(); e != nil {
					end = e
				}
			}
			if end.GetStatus() != tt.status || end.GetExited() || end.GetExitCode() != -1 {
				t.Errorf("end = %v, want status %q, not exited, exit code -1", end, tt.status)
			}
		})
	}
	_, err := c.Process().SendSignal(testCtx(t), connect.NewRequest(&processv1.SendSignalRequest{
		Process: &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Pid{Pid: 999999}}, Signal: processv1.Signal_SIGNAL_SIGKILL,
	}))
	wantCode(t, err, connect.CodeNotFound)
}

func TestPTYEchoAndResize(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	ctx := testCtx(t)
	stream, err := c.Process().Start(ctx, connect.NewRequest(&processv1.StartRequest{
		Process: &processv1.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "stty size; read line; echo \"got $line\"; stty size"}},
		Pty:     &processv1.PTY{Size: &processv1.PTY_Size{Cols: 80, Rows: 24}},
	}))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stream.Receive()
	sel := &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Pid{Pid: stream.Msg().GetEvent().GetStart().GetPid()}}
	var out strings.Builder
	for !strings.Contains(out.String(), "24 80") {
		if !stream.Receive() {
			t.Fatalf("stream ended before the first stty size, output %q: %v", out.String(), stream.Err())
		}
		out.Write(stream.Msg().GetEvent().GetData().GetPty())
	}
	if _, err := c.Process().Update(ctx, connect.NewRequest(&processv1.UpdateRequest{
		Process: sel, Pty: &processv1.PTY{Size: &processv1.PTY_Size{Cols: 100, Rows: 40}},
	})); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if _, err := c.Process().SendInput(ctx, connect.NewRequest(&processv1.SendInputRequest{
		Process: sel, Input: &processv1.ProcessInput{Input: &processv1.ProcessInput_Pty{Pty: []byte("ping\n")}},
	})); err != nil {
		t.Fatalf("SendInput: %v", err)
	}
	var end *processv1.ProcessEvent_EndEvent
	for stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetPty())
		if e := stream.Msg().GetEvent().GetEnd(); e != nil {
			end = e
		}
	}
	got := out.String()
	for _, want := range []string{"ping\r\n", "got ping", "40 100"} { // echo by the tty, the shell's output, the new size
		if !strings.Contains(got, want) {
			t.Errorf("pty output %q does not contain %q", got, want)
		}
	}
	if end.GetExitCode() != 0 {
		t.Errorf("end = %v, want exit 0", end)
	}
	_, err = c.Process().CloseStdin(ctx, connect.NewRequest(&processv1.CloseStdinRequest{Process: sel}))
	wantCode(t, err, connect.CodeNotFound) // the process has ended
}

func TestTimeoutKillsProcess(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	stream, err := c.Process().Start(ctx, connect.NewRequest(sh("exec sleep 100")))
	if err == nil {
		_, err = collect(t, stream)
	}
	wantCode(t, err, connect.CodeDeadlineExceeded)
	waitNoProcesses(t, c) // the daemon killed it

}

// waitNoProcesses waits until the daemon runs no process (the condition,
// not a duration, is what the test checks).
func waitNoProcesses(t *testing.T, c *guest.Client) {
	t.Helper()
	ctx := testCtx(t)
	for {
		resp, err := c.Process().List(ctx, connect.NewRequest(&processv1.ListRequest{}))
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if len(resp.Msg.GetProcesses()) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("processes still running: %v", resp.Msg.GetProcesses())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func ptr[T any](v T) *T { return &v }
