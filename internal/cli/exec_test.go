package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// execServer is a streaming exec endpoint driven by the test: it hands each
// ExecStart and client message to the test's script.
type execServer struct {
	mu     sync.Mutex
	starts []sandboxv1.ExecStart
	script func(ctx context.Context, start sandboxv1.ExecStart, recv func() (sandboxv1.ExecMessage, error), send func(sandboxv1.ExecMessage))
}

func (s *execServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	ctx := r.Context()
	_, b, err := conn.Read(ctx)
	if err != nil {
		return
	}
	var start sandboxv1.ExecStart
	if json.Unmarshal(b, &start) != nil {
		return
	}
	s.mu.Lock()
	s.starts = append(s.starts, start)
	s.mu.Unlock()
	recv := func() (sandboxv1.ExecMessage, error) {
		var m sandboxv1.ExecMessage
		_, b, err := conn.Read(ctx)
		if err != nil {
			return m, err
		}
		return m, json.Unmarshal(b, &m)
	}
	send := func(m sandboxv1.ExecMessage) {
		b, _ := json.Marshal(m)
		_ = conn.Write(ctx, websocket.MessageText, b)
	}
	s.script(ctx, start, recv, send)
	conn.Close(websocket.StatusNormalClosure, "")
}

func exitMsg(code int) sandboxv1.ExecMessage {
	return sandboxv1.ExecMessage{Type: "exit", ExitCode: &code}
}

// catScript echoes stdin to stdout until close_stdin, then exits with 5.
func catScript(ctx context.Context, start sandboxv1.ExecStart, recv func() (sandboxv1.ExecMessage, error), send func(sandboxv1.ExecMessage)) {
	send(sandboxv1.ExecMessage{Type: "started", Pid: 9})
	send(sandboxv1.ExecMessage{Type: "stderr", Data: []byte("cwd=" + start.Cwd + " env=" + start.Env["K"] + "\n")})
	for {
		m, err := recv()
		if err != nil {
			return
		}
		switch m.Type {
		case "stdin":
			send(sandboxv1.ExecMessage{Type: "stdout", Data: m.Data})
		case "close_stdin":
			send(exitMsg(5))
			return
		}
	}
}

func TestExecStreamsAndExitsWithCommandCode(t *testing.T) {
	es := &execServer{script: catScript}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/sandboxes/{id}/exec", es)
	fakeServer(t, mux)
	input := strings.Repeat("line of input\n", 5000)
	code, out, errOut := run(t, strings.NewReader(input), "exec", "sb-1", "--cwd", "/tmp", "--env", "K=V", "--", "cat", "-n")
	if code != 5 {
		t.Fatalf("exit %d, stderr %q; want the command's 5", code, errOut)
	}
	if out != input {
		t.Errorf("stdout has %d bytes, want the %d of stdin echoed", len(out), len(input))
	}
	if errOut != "cwd=/tmp env=V\n" {
		t.Errorf("stderr = %q", errOut)
	}
	if got := es.starts[0].Cmd; strings.Join(got, " ") != "cat -n" || es.starts[0].TTY {
		t.Errorf("start = %+v, want cat -n without a TTY", es.starts[0])
	}
}

func TestExecForwardsSIGINT(t *testing.T) {
	es := &execServer{script: func(ctx context.Context, start sandboxv1.ExecStart, recv func() (sandboxv1.ExecMessage, error), send func(sandboxv1.ExecMessage)) {
		// The CLI registered for SIGINT before dialling, so raising it now is safe.
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			send(sandboxv1.ExecMessage{Type: "error", Message: err.Error()})
			return
		}
		// A liveness guard, not a speed check: without it a CLI that drops the
		// signal would hang the test instead of failing it.
		guard := time.AfterFunc(30*time.Second, func() {
			send(sandboxv1.ExecMessage{Type: "error", Message: "no signal was forwarded"})
		})
		defer guard.Stop()
		for {
			m, err := recv()
			if err != nil {
				return
			}
			if m.Type == "signal" {
				send(sandboxv1.ExecMessage{Type: "stdout", Data: fmt.Appendf(nil, "got signal %d\n", m.Signal)})
				send(exitMsg(130))
				return
			}
		}
	}}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/sandboxes/{id}/exec", es)
	fakeServer(t, mux)
	pr, pw := io.Pipe() // stdin that stays open
	defer pw.Close()
	code, out, errOut := run(t, pr, "exec", "sb-1", "--", "sleep", "100")
	if code != 130 || out != "got signal 2\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 130 and the signal forwarded", code, out, errOut)
	}
}

func TestExecServerErrorExitsOne(t *testing.T) {
	es := &execServer{script: func(ctx context.Context, start sandboxv1.ExecStart, recv func() (sandboxv1.ExecMessage, error), send func(sandboxv1.ExecMessage)) {
		send(sandboxv1.ExecMessage{Type: "error", Message: "executable file not found: " + start.Cmd[0]})
	}}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/sandboxes/{id}/exec", es)
	fakeServer(t, mux)
	code, _, errOut := run(t, nil, "exec", "sb-1", "--", "nope")
	if code != 1 || errOut != "space: executable file not found: nope\n" {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestExecTTYRawModeAndResize(t *testing.T) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal available: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: 90, Rows: 20}); err != nil {
		t.Fatal(err)
	}
	resized := make(chan string, 1)
	es := &execServer{script: func(ctx context.Context, start sandboxv1.ExecStart, recv func() (sandboxv1.ExecMessage, error), send func(sandboxv1.ExecMessage)) {
		send(sandboxv1.ExecMessage{Type: "started", Pid: 1})
		// The terminal must be raw by now: ECHO and ICANON off.
		st, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		if err != nil || st.Lflag&(unix.ECHO|unix.ICANON) != 0 {
			send(sandboxv1.ExecMessage{Type: "error", Message: fmt.Sprintf("terminal not raw: %v", err)})
			return
		}
		_ = pty.Setsize(ptmx, &pty.Winsize{Cols: 120, Rows: 40})
		_ = syscall.Kill(os.Getpid(), syscall.SIGWINCH)
		for {
			m, err := recv()
			if err != nil {
				return
			}
			if m.Type == "resize" {
				resized <- fmt.Sprintf("%dx%d", m.Cols, m.Rows)
				send(exitMsg(0))
				return
			}
		}
	}}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/sandboxes/{id}/exec", es)
	fakeServer(t, mux)
	var out, errOut strings.Builder
	code := Main([]string{"exec", "sb-1", "--tty", "--", "bash"}, tty, &out, &errOut, nil)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	if got := <-resized; got != "120x40" {
		t.Errorf("resize = %s, want 120x40", got)
	}
	start := es.starts[0]
	if !start.TTY || start.Cols != 90 || start.Rows != 20 || start.Env["TERM"] == "" {
		t.Errorf("start = %+v, want a 90x20 TTY with TERM set", start)
	}
	st, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil || st.Lflag&unix.ECHO == 0 {
		t.Errorf("terminal not restored after exit (err %v)", err)
	}
}

func TestShellFallsBackToSh(t *testing.T) {
	for _, tt := range []struct {
		name     string
		bashExit int
		want     string
	}{{"bash present", 0, "/bin/bash -l"}, {"no bash", 127, "/bin/sh"}} {
		t.Run(tt.name, func(t *testing.T) {
			es := &execServer{script: func(ctx context.Context, start sandboxv1.ExecStart, recv func() (sandboxv1.ExecMessage, error), send func(sandboxv1.ExecMessage)) {
				send(exitMsg(0))
			}}
			mux := http.NewServeMux()
			mux.Handle("GET /v1/sandboxes/{id}/exec", es)
			mux.HandleFunc("POST /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
				writeJSONResp(w, 200, sandboxv1.ExecResult{ExitCode: tt.bashExit})
			})
			fakeServer(t, mux)
			if code, _, errOut := run(t, nil, "shell", "sb-1"); code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if got := strings.Join(es.starts[0].Cmd, " "); got != tt.want || !es.starts[0].TTY {
				t.Errorf("shell ran %q (tty %v), want %q with a TTY", got, es.starts[0].TTY, tt.want)
			}
		})
	}
}
