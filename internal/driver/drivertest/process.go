package drivertest

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
)

// result is what one process produced, collected from its event stream.
type result struct {
	pid                 uint32
	stdout, stderr, pty bytes.Buffer
	end                 *processv1.ProcessEvent_EndEvent
}

func (r *result) String() string {
	return fmt.Sprintf("pid %d, end %v, stdout %q, stderr %q, pty %q", r.pid, r.end, r.stdout.String(), r.stderr.String(), r.pty.String())
}

// stream is a started process whose events the test reads one by one.
type stream struct {
	s   *connect.ServerStreamForClient[processv1.StartResponse]
	res result
}

// startProcess starts a process and reads its start event. user, when not
// empty, is sent as Basic auth (envd's way of naming the user).
func (sb *sandbox) startProcess(ctx context.Context, req *processv1.StartRequest, user string) (*stream, error) {
	creq := connect.NewRequest(req)
	if user != "" {
		creq.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
	s, err := sb.client.Process().Start(ctx, creq)
	if err != nil {
		return nil, err
	}
	st := &stream{s: s}
	for st.s.Receive() {
		if start := st.s.Msg().GetEvent().GetStart(); start != nil {
			st.res.pid = start.GetPid()
			return st, nil
		}
	}
	err = s.Err()
	s.Close()
	if err == nil {
		err = fmt.Errorf("process stream ended without a start event")
	}
	return nil, err
}

// next reads one data or end event (skipping keepalives) into the result;
// it returns false at the end event or when the stream fails.
func (st *stream) next() (bool, error) {
	for st.s.Receive() {
		ev := st.s.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			st.res.stdout.Write(d.GetStdout())
			st.res.stderr.Write(d.GetStderr())
			st.res.pty.Write(d.GetPty())
			return true, nil
		}
		if end := ev.GetEnd(); end != nil {
			st.res.end = end
			return false, nil
		}
	}
	if err := st.s.Err(); err != nil {
		return false, err
	}
	return false, fmt.Errorf("process %d: stream ended without an end event", st.res.pid)
}

// wait reads until the end event and closes the stream.
func (st *stream) wait() (*result, error) {
	defer st.s.Close()
	for {
		more, err := st.next()
		if err != nil {
			return &st.res, err
		}
		if !more {
			return &st.res, nil
		}
	}
}

// readUntil reads events until out() contains want or the process ends.
func (st *stream) readUntil(out func() string, want string) error {
	for !strings.Contains(out(), want) {
		more, err := st.next()
		if err != nil {
			return err
		}
		if !more {
			return fmt.Errorf("process ended before printing %q: %v", want, &st.res)
		}
	}
	return nil
}

// run runs argv to completion as user ("" for the default) and returns
// what it printed and how it ended.
func (sb *sandbox) run(t *testing.T, user string, argv ...string) *result {
	t.Helper()
	return sb.runFor(t, callTimeout, user, argv...)
}

// runFor is run with a bound of its own.
func (sb *sandbox) runFor(t *testing.T, d time.Duration, user string, argv ...string) *result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	st, err := sb.startProcess(ctx, &processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: argv[0], Args: argv[1:]}, Stdin: new(false)}, user)
	if err != nil {
		t.Fatalf("start %q: %v", argv, err)
	}
	res, err := st.wait()
	if err != nil {
		t.Fatalf("run %q: %v (%v)", argv, err, res)
	}
	return res
}

// sh runs a shell command line and returns its stdout; it fails the test
// unless the command exits 0.
func (sb *sandbox) sh(t *testing.T, line string) string {
	t.Helper()
	res := sb.run(t, "", "/bin/sh", "-c", line)
	if !res.end.GetExited() || res.end.GetExitCode() != 0 {
		t.Fatalf("sh -c %q: %v, want exit 0", line, res)
	}
	return res.stdout.String()
}

// exitCode returns the exit code of res, or -1 when it did not exit.
func exitCode(res *result) int {
	if !res.end.GetExited() {
		return -1
	}
	return int(res.end.GetExitCode())
}

// killedBySignal reports whether res ended by signal sig ("killed",
// "terminated").
func killedBySignal(res *result, sig string) bool {
	return res.end != nil && !res.end.GetExited() && strings.Contains(res.end.GetStatus(), sig)
}
