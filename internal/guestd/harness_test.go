package guestd_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/user"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/internal/guest"
	"github.com/spacesandbox/space/internal/guestd"
)

// socketPair returns both ends of a real unix stream socketpair.
func socketPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatalf("FileConn: %v", err)
		}
		conns[i] = c
	}
	return conns[0], conns[1]
}

// startGuest serves a fresh daemon on one end of a socketpair and returns a
// client on the other; both stop when the test ends.
func startGuest(t testing.TB, cfg guestd.Config) *guest.Client {
	t.Helper()
	server, clientConn := socketPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	go func() { done <- guestd.Serve(ctx, server, cfg, log) }()
	c, err := guest.NewClient(clientConn)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() {
		c.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	if os.Geteuid() != 0 {
		// Without root the daemon can only run processes as its own user.
		_, err := c.Control().Init(testCtx(t), connect.NewRequest(&controlv1.InitRequest{DefaultUser: self(t).Username}))
		if err != nil {
			t.Fatalf("Init with the test's user: %v", err)
		}
	}
	return c
}

// self is the user running the test.
func self(t testing.TB) *user.User {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatalf("current user: %v", err)
	}
	return u
}

// testCtx is a context that ends with the test, bounded so a bug cannot hang
// the run.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// result is what one process produced.
type result struct {
	pid            uint32
	stdout, stderr bytes.Buffer
	pty            bytes.Buffer
	end            *processv1.ProcessEvent_EndEvent
}

// collect reads a Start or Connect stream to its end.
func collect[T interface {
	GetEvent() *processv1.ProcessEvent
}](t testing.TB, stream interface {
	Receive() bool
	Msg() T
	Err() error
}) (*result, error) {
	t.Helper()
	res := &result{}
	first := true
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if first {
			if ev.GetStart() == nil {
				t.Fatalf("first event = %v, want start", ev)
			}
			first = false
		}
		switch e := ev.GetEvent().(type) {
		case *processv1.ProcessEvent_Start:
			res.pid = e.Start.GetPid()
		case *processv1.ProcessEvent_Data:
			res.stdout.Write(e.Data.GetStdout())
			res.stderr.Write(e.Data.GetStderr())
			res.pty.Write(e.Data.GetPty())
		case *processv1.ProcessEvent_End:
			res.end = e.End
		}
	}
	return res, stream.Err()
}

// run starts cmd with args and waits for its end.
func run(t testing.TB, c *guest.Client, req *processv1.StartRequest, user string) *result {
	t.Helper()
	r := connect.NewRequest(req)
	if user != "" {
		r.Header().Set("Authorization", basicAuth(user))
	}
	stream, err := c.Process().Start(testCtx(t), r)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	res, err := collect(t, stream)
	if err != nil {
		t.Fatalf("Start %v: stream: %v", req.GetProcess().GetCmd(), err)
	}
	if res.end == nil {
		t.Fatalf("Start %v: stream ended without an end event", req.GetProcess().GetCmd())
	}
	return res
}

func sh(script string) *processv1.StartRequest {
	no := false
	return &processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}, Stdin: &no}
}

func basicAuth(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
}

func wantCode(t *testing.T, err error, want connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want code %v", want)
	}
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != want {
		t.Fatalf("err = %v (code %v), want code %v", err, connect.CodeOf(err), want)
	}
}

func requireRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: " + why)
	}
}
