package drivertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
)

// testExec covers the process service on one shared execution; the subtests
// run in parallel and each waits for the processes it starts.
func testExec(t *testing.T, s *suite) {
	sb := s.start(t, options{})
	tests := []struct {
		name string
		fn   func(t *testing.T, sb *sandbox)
	}{
		{"OutputSeparated", testOutputSeparated},
		{"ExitCodes", testExitCodes},
		{"CommandNotFound", testCommandNotFound},
		{"Stdin", testStdin},
		{"Signal", testSignal},
		{"DeadlineKills", testDeadlineKills},
		{"Streaming", testStreaming},
		{"PTY", testPTY},
		{"EnvAndCwd", testEnvAndCwd},
		{"User", testUser},
		{"ConnectByTagAndList", testConnectByTag},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, sb)
		})
	}
}

func testOutputSeparated(t *testing.T, sb *sandbox) {
	res := sb.run(t, "", "/bin/sh", "-c", "echo out; echo err >&2; echo out2")
	if got := res.stdout.String(); got != "out\nout2\n" {
		t.Errorf("stdout = %q, want %q", got, "out\nout2\n")
	}
	if got := res.stderr.String(); got != "err\n" {
		t.Errorf("stderr = %q, want %q", got, "err\n")
	}
	if exitCode(res) != 0 || res.end.GetStatus() != "exit status 0" {
		t.Errorf("end = %v, want exit status 0", res.end)
	}
}

func testExitCodes(t *testing.T, sb *sandbox) {
	tests := []struct {
		line string
		code int
	}{
		{"true", 0},
		{"exit 3", 3},
		{"exit 255", 255},
	}
	for _, tt := range tests {
		res := sb.run(t, "", "/bin/sh", "-c", tt.line)
		if got := exitCode(res); got != tt.code {
			t.Errorf("sh -c %q: exit %d (%v), want %d", tt.line, got, res.end, tt.code)
		}
	}
	res := sb.run(t, "", "/bin/sh", "-c", "kill -KILL $$")
	if !killedBySignal(res, "killed") || res.end.GetExitCode() != -1 {
		t.Errorf("a shell that SIGKILLs itself: %v, want exited=false, exit code -1, status signal: killed", res.end)
	}
}

func testCommandNotFound(t *testing.T, sb *sandbox) {
	ctx := callCtx(t)
	_, err := sb.startProcess(ctx, &processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "no-such-command-xyz"}}, "")
	if err == nil {
		t.Fatal("starting a command that does not exist succeeded")
	}
	if code := connect.CodeOf(err); code == connect.CodeDeadlineExceeded || code == connect.CodeUnknown || code == connect.CodeInternal {
		t.Errorf("start of a missing command: code %v (%v), want a clear client error such as NotFound", code, err)
	}
	t.Logf("start of a missing command: %v", err)
	if !strings.Contains(err.Error(), "no-such-command-xyz") {
		t.Errorf("start of a missing command: %v, want the error to name the command", err)
	}
	// A path that exists but is not executable is refused too.
	if _, err := sb.startProcess(ctx, &processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "/etc/passwd"}}, ""); err == nil {
		t.Error("starting /etc/passwd (not executable) succeeded")
	}
}

func testStdin(t *testing.T, sb *sandbox) {
	ctx := callCtx(t)
	st, err := sb.startProcess(ctx, &processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "cat"}, Stdin: new(true)}, "")
	if err != nil {
		t.Fatalf("start cat: %v", err)
	}
	sel := &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Pid{Pid: st.res.pid}}
	for _, chunk := range []string{"hello ", "stdin\n"} {
		in := &processv1.ProcessInput{Input: &processv1.ProcessInput_Stdin{Stdin: []byte(chunk)}}
		if _, err := sb.client.Process().SendInput(ctx, connect.NewRequest(&processv1.SendInputRequest{Process: sel, Input: in})); err != nil {
			t.Fatalf("SendInput: %v", err)
		}
	}
	if _, err := sb.client.Process().CloseStdin(ctx, connect.NewRequest(&processv1.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	res, err := st.wait()
	if err != nil {
		t.Fatalf("cat: %v", err)
	}
	if res.stdout.String() != "hello stdin\n" || exitCode(res) != 0 {
		t.Errorf("cat fed by SendInput then CloseStdin: %v, want %q and exit 0", res, "hello stdin\n")
	}
}

func testSignal(t *testing.T, sb *sandbox) {
	ctx := callCtx(t)
	st, err := sb.startProcess(ctx, &processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "sleep", Args: []string{"600"}}}, "")
	if err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	sel := &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Pid{Pid: st.res.pid}}
	if _, err := sb.client.Process().SendSignal(ctx, connect.NewRequest(&processv1.SendSignalRequest{Process: sel, Signal: processv1.Signal_SIGNAL_SIGTERM})); err != nil {
		t.Fatalf("SendSignal SIGTERM: %v", err)
	}
	res, err := st.wait()
	if err != nil {
		t.Fatalf("sleep after SIGTERM: %v", err)
	}
	if !killedBySignal(res, "terminated") {
		t.Errorf("sleep after SIGTERM ended with %v, want signal: terminated", res.end)
	}
	// The process is gone: signalling it again is an error, not a success.
	if _, err := sb.client.Process().SendSignal(ctx, connect.NewRequest(&processv1.SendSignalRequest{Process: sel, Signal: processv1.Signal_SIGNAL_SIGKILL})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("SendSignal to an ended process: %v, want NotFound", err)
	}
}

// testDeadlineKills: a Start call with a deadline (Connect-Timeout-Ms on the
// wire) kills its process when the deadline passes, as envd does.
func testDeadlineKills(t *testing.T, sb *sandbox) {
	tag := "deadline-" + sb.spec.ExecID
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	st, err := sb.startProcess(ctx, &processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "sleep", Args: []string{"600"}}, Tag: &tag}, "")
	if err != nil {
		t.Fatalf("start sleep with a deadline: %v", err)
	}
	res, err := st.wait()
	if err == nil && !killedBySignal(res, "killed") {
		t.Fatalf("sleep 600 under a 1.5 s deadline ended with %v, want killed or a deadline error", res.end)
	}
	if err != nil && connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Errorf("sleep 600 under a 1.5 s deadline: %v, want DeadlineExceeded", err)
	}
	// The guest kills the process: it leaves the process list.
	waitFor(t, "the process started with a deadline to be killed", func() bool {
		return !sb.listed(t, st.res.pid)
	})
}

// listed reports whether List shows pid.
func (sb *sandbox) listed(t *testing.T, pid uint32) bool {
	t.Helper()
	resp, err := sb.client.Process().List(callCtx(t), connect.NewRequest(&processv1.ListRequest{}))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, p := range resp.Msg.GetProcesses() {
		if p.GetPid() == pid {
			return true
		}
	}
	return false
}

// testStreaming: output arrives while the process runs. The shell prints a,
// then blocks on stdin; b can only be printed after the test has read a and
// answered, so a guest that buffers output until exit fails here (on the
// call timeout) instead of passing by luck.
func testStreaming(t *testing.T, sb *sandbox) {
	ctx := callCtx(t)
	st, err := sb.startProcess(ctx, &processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo a; read x; echo b"}}, Stdin: new(true)}, "")
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if err := st.readUntil(st.res.stdout.String, "a\n"); err != nil {
		t.Fatalf("waiting for the first line while the process runs: %v", err)
	}
	if strings.Contains(st.res.stdout.String(), "b") {
		t.Fatalf("stdout %q: b printed before its input was sent", st.res.stdout.String())
	}
	sel := &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Pid{Pid: st.res.pid}}
	in := &processv1.ProcessInput{Input: &processv1.ProcessInput_Stdin{Stdin: []byte("go\n")}}
	if _, err := sb.client.Process().SendInput(ctx, connect.NewRequest(&processv1.SendInputRequest{Process: sel, Input: in})); err != nil {
		t.Fatalf("SendInput: %v", err)
	}
	res, err := st.wait()
	if err != nil || res.stdout.String() != "a\nb\n" || exitCode(res) != 0 {
		t.Errorf("streaming: %v, %v; want a, b and exit 0", res, err)
	}
}

func testPTY(t *testing.T, sb *sandbox) {
	ctx := callCtx(t)
	size := &processv1.PTY{Size: &processv1.PTY_Size{Cols: 80, Rows: 24}}
	st, err := sb.startProcess(ctx, &processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "tty"}, Pty: size}, "")
	if err != nil {
		t.Fatalf("start tty: %v", err)
	}
	res, err := st.wait()
	if err != nil || exitCode(res) != 0 || !strings.HasPrefix(res.pty.String(), "/dev/pts/") {
		t.Errorf("tty under a PTY: %v, %v; want a /dev/pts device on the pty stream and exit 0", res, err)
	}
	if res.stdout.Len() != 0 {
		t.Errorf("tty under a PTY wrote %q to stdout; PTY output belongs on the pty stream", res.stdout.String())
	}

	st, err = sb.startProcess(ctx, &processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "/bin/sh"}, Pty: size}, "")
	if err != nil {
		t.Fatalf("start sh under a PTY: %v", err)
	}
	sel := &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Pid{Pid: st.res.pid}}
	resize := &processv1.PTY{Size: &processv1.PTY_Size{Cols: 100, Rows: 40}}
	if _, err := sb.client.Process().Update(ctx, connect.NewRequest(&processv1.UpdateRequest{Process: sel, Pty: resize})); err != nil {
		t.Fatalf("Update (resize): %v", err)
	}
	in := &processv1.ProcessInput{Input: &processv1.ProcessInput_Pty{Pty: []byte("stty size; exit 7\n")}}
	if _, err := sb.client.Process().SendInput(ctx, connect.NewRequest(&processv1.SendInputRequest{Process: sel, Input: in})); err != nil {
		t.Fatalf("SendInput to the PTY: %v", err)
	}
	res, err = st.wait()
	if err != nil || !strings.Contains(res.pty.String(), "40 100") || exitCode(res) != 7 {
		t.Errorf("stty size after a resize to 100x40: %v, %v; want \"40 100\" and exit 7", res, err)
	}
}

func testEnvAndCwd(t *testing.T, sb *sandbox) {
	ctx := callCtx(t)
	cfg := &processv1.ProcessConfig{
		Cmd: "/bin/sh", Args: []string{"-c", `echo "$FOO|$HOME|$(pwd)"`},
		Envs: map[string]string{"FOO": "bar baz"}, Cwd: new("/etc"),
	}
	st, err := sb.startProcess(ctx, &processv1.StartRequest{Process: cfg}, "")
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	res, err := st.wait()
	if want := "bar baz|/root|/etc\n"; err != nil || res.stdout.String() != want {
		t.Errorf("env and cwd: %v, %v; want stdout %q", res, err, want)
	}
	cfg.Cwd = new("/no/such/dir")
	if _, err := sb.startProcess(ctx, &processv1.StartRequest{Process: cfg}, ""); err == nil {
		t.Error("start with a cwd that does not exist succeeded")
	}
}

func testUser(t *testing.T, sb *sandbox) {
	tests := []struct {
		user, want string
	}{
		{"", "0 /root"},
		{"root", "0 /root"},
		{"user", "1000 /home/user"},
	}
	for _, tt := range tests {
		res := sb.run(t, tt.user, "/bin/sh", "-c", `echo "$(id -u) $HOME"`)
		if got := strings.TrimSpace(res.stdout.String()); got != tt.want {
			t.Errorf("as %q: %q (%v), want %q", tt.user, got, res.end, tt.want)
		}
	}
	ctx := callCtx(t)
	_, err := sb.startProcess(ctx, &processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "true"}}, "nosuchuser")
	if code := connect.CodeOf(err); err == nil || code == connect.CodeInternal || code == connect.CodeUnknown {
		t.Errorf("start as an unknown user: %v (code %v), want a clear client error", err, code)
	}
}

// testConnectByTag: a second client attaches to a running process by tag,
// sees its output and end, and List shows the process while it runs.
func testConnectByTag(t *testing.T, sb *sandbox) {
	ctx := callCtx(t)
	tag := "tagged-" + sb.spec.ExecID
	cfg := &processv1.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "read x; echo got $x"}}
	st, err := sb.startProcess(ctx, &processv1.StartRequest{Process: cfg, Tag: &tag, Stdin: new(true)}, "")
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer st.s.Close()

	resp, err := sb.client.Process().List(ctx, connect.NewRequest(&processv1.ListRequest{}))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	found := false
	for _, p := range resp.Msg.GetProcesses() {
		if p.GetTag() == tag {
			found = true
			if p.GetPid() != st.res.pid || p.GetConfig().GetCmd() != "/bin/sh" {
				t.Errorf("List entry for %s: pid %d cmd %q, want pid %d cmd /bin/sh", tag, p.GetPid(), p.GetConfig().GetCmd(), st.res.pid)
			}
		}
	}
	if !found {
		t.Errorf("List does not show the running process tagged %s: %v", tag, resp.Msg.GetProcesses())
	}

	sel := &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Tag{Tag: tag}}
	cs, err := sb.client.Process().Connect(ctx, connect.NewRequest(&processv1.ConnectRequest{Process: sel}))
	if err != nil {
		t.Fatalf("Connect by tag: %v", err)
	}
	defer cs.Close()
	if !cs.Receive() || cs.Msg().GetEvent().GetStart().GetPid() != st.res.pid {
		t.Fatalf("Connect by tag: first event %v (%v), want start with pid %d", cs.Msg(), cs.Err(), st.res.pid)
	}
	in := &processv1.ProcessInput{Input: &processv1.ProcessInput_Stdin{Stdin: []byte("hi\n")}}
	if _, err := sb.client.Process().SendInput(ctx, connect.NewRequest(&processv1.SendInputRequest{Process: sel, Input: in})); err != nil {
		t.Fatalf("SendInput by tag: %v", err)
	}
	var out strings.Builder
	var end *processv1.ProcessEvent_EndEvent
	for end == nil && cs.Receive() {
		ev := cs.Msg().GetEvent()
		out.Write(ev.GetData().GetStdout())
		end = ev.GetEnd()
	}
	if end == nil || out.String() != "got hi\n" || !end.GetExited() || end.GetExitCode() != 0 {
		t.Errorf("connected stream: output %q end %v (%v), want %q and exit 0", out.String(), end, cs.Err(), "got hi\n")
	}
	if res, err := st.wait(); err != nil || res.stdout.String() != "got hi\n" {
		t.Errorf("starting stream: %v, %v; want the same output", res, err)
	}
	// The process has ended and left the table: connecting again fails
	// (the error may come with the first Receive of a server stream).
	cs, err = sb.client.Process().Connect(ctx, connect.NewRequest(&processv1.ConnectRequest{Process: sel}))
	if err == nil {
		if cs.Receive() {
			t.Errorf("Connect to an ended process: got event %v, want NotFound", cs.Msg())
		}
		err = cs.Err()
		cs.Close()
	}
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Connect to an ended process: %v, want NotFound", err)
	}
}

// waitFor polls cond until it holds or callTimeout passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(callTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for %s", callTimeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
