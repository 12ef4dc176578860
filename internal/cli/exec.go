package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	space "github.com/spacesandbox/space/sdk/go"
)

func init() {
	commands = append(commands,
		&command{path: "exec", args: "ID [--env K=V]… [--cwd DIR] [--user U] [--tty] -- CMD [ARG…]",
			summary: "run a command in a sandbox, streaming its output and stdin; exits with its exit code",
			run:     runExec, ownSignals: true},
		&command{path: "shell", args: "ID [--user U] [--cwd DIR]",
			summary: "interactive shell in a sandbox (bash -l, else sh)", run: runShell, ownSignals: true},
	)
}

func runExec(ctx context.Context, e *env, args []string) error {
	fs := newFlags("exec")
	env := kvFlag{}
	var start sandboxv1.ExecStart
	fs.Var(env, "env", "environment variable K=V (repeatable)")
	fs.StringVar(&start.Cwd, "cwd", "", "working directory")
	fs.StringVar(&start.User, "user", "", "user to run as")
	fs.BoolVar(&start.TTY, "tty", false, "run in a pseudo-terminal; the local terminal goes raw")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 2, -1, "ID", "CMD"); err != nil {
		return err
	}
	start.Cmd = pos[1:]
	if len(env) > 0 {
		start.Env = env
	}
	return e.stream(ctx, pos[0], start)
}

func runShell(ctx context.Context, e *env, args []string) error {
	fs := newFlags("shell")
	var start sandboxv1.ExecStart
	fs.StringVar(&start.Cwd, "cwd", "", "working directory")
	fs.StringVar(&start.User, "user", "", "user to run as")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 1, "ID"); err != nil {
		return err
	}
	start.Cmd, start.TTY = shellCommand(ctx, e.c, pos[0], start.User), true
	return e.stream(ctx, pos[0], start)
}

// shellCommand returns bash as a login shell when the sandbox has one, else sh.
// The probe's errors are not reported: a sandbox that cannot run the probe gets
// /bin/sh, and the real stream then reports whatever is wrong.
func shellCommand(ctx context.Context, c *space.Client, id, user string) []string {
	res, err := c.Exec(ctx, id, sandboxv1.ExecRequest{Cmd: []string{"/bin/bash", "-c", "exit 0"}, User: user, Timeout: "30s"})
	if err == nil && res.ExitCode == 0 {
		return []string{"/bin/bash", "-l"}
	}
	return []string{"/bin/sh"}
}

// stream runs start in sandbox id over the streaming exec: stdout and stderr as
// they come, stdin forwarded (close_stdin at EOF), SIGINT and SIGTERM forwarded,
// and with a TTY the local terminal in raw mode and its resizes forwarded. It
// returns the command's exit code as an exitCode error.
func (e *env) stream(ctx context.Context, id string, start sandboxv1.ExecStart) error {
	sigs := make(chan os.Signal, 8)
	watched := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if start.TTY {
		watched = append(watched, syscall.SIGWINCH)
	}
	// Registered before the stream starts, so no signal meant for the remote
	// command can kill this process instead.
	signal.Notify(sigs, watched...)
	defer signal.Stop(sigs)

	restore, err := e.prepareTTY(&start)
	if err != nil {
		return err
	}
	defer restore()

	s, err := e.c.StartExec(ctx, id, start, space.StreamOptions{Stdout: e.stdout, Stderr: e.stderr})
	if err != nil {
		return err
	}
	defer s.Close()
	// The copy ends at EOF of stdin or at the first failed send once the stream
	// is over; a stdin that never delivers keeps it in Read until the process ends.
	go func() {
		if _, err := io.Copy(s.Stdin(), e.stdin); err == nil {
			_ = s.CloseStdin()
		}
	}()
	e.forwardSignals(ctx, s, sigs)
	code, err := s.Wait()
	restore()
	if err != nil {
		return err
	}
	if code < 0 || code > 255 {
		return fmt.Errorf("the command ended with exit code %d", code)
	}
	return exitCode(code)
}

// forwardSignals sends the signals this process receives to the remote command
// until the stream ends. A third SIGINT or SIGTERM gives up on the command and
// closes the stream.
func (e *env) forwardSignals(ctx context.Context, s *space.ExecStream, sigs <-chan os.Signal) {
	interrupts := 0
	for {
		select {
		case <-s.Done():
			return
		case sig := <-sigs:
			if sig == syscall.SIGWINCH {
				if cols, rows, ok := e.termSize(); ok {
					_ = s.Resize(ctx, cols, rows)
				}
				continue
			}
			sysSig, _ := sig.(syscall.Signal)
			if interrupts++; interrupts >= 3 {
				fmt.Fprintln(e.stderr, "space: closing the stream")
				s.Close()
				return
			}
			_ = s.Signal(ctx, sysSig)
		}
	}
}

// prepareTTY fills in the terminal size and TERM of a TTY exec and puts the local
// terminal, when stdin is one, in raw mode. The returned restore is safe to call
// more than once.
func (e *env) prepareTTY(start *sandboxv1.ExecStart) (restore func(), err error) {
	restore = func() {}
	if !start.TTY {
		return restore, nil
	}
	if cols, rows, ok := e.termSize(); ok {
		start.Cols, start.Rows = cols, rows
	}
	if _, set := start.Env["TERM"]; !set {
		if start.Env == nil {
			start.Env = map[string]string{}
		}
		start.Env["TERM"] = os.Getenv("TERM")
		if start.Env["TERM"] == "" {
			start.Env["TERM"] = "xterm-256color"
		}
	}
	f, ok := e.stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return restore, nil
	}
	old, err := term.MakeRaw(int(f.Fd()))
	if err != nil {
		return nil, fmt.Errorf("put the terminal in raw mode: %w", err)
	}
	done := false
	return func() {
		if !done {
			done = true
			_ = term.Restore(int(f.Fd()), old)
		}
	}, nil
}

// termSize returns the size of the local terminal: stdin's, else stdout's.
func (e *env) termSize() (cols, rows uint32, ok bool) {
	for _, s := range []any{e.stdin, e.stdout} {
		f, isFile := s.(*os.File)
		if !isFile || !term.IsTerminal(int(f.Fd())) {
			continue
		}
		w, h, err := term.GetSize(int(f.Fd()))
		if err == nil && w > 0 && h > 0 {
			return uint32(w), uint32(h), true
		}
	}
	return 0, 0, false
}
