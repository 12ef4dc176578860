package bridge

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/guestd"
	"github.com/spacesandbox/space/internal/unixsock"
)

// helperEnv makes the test binary a stand-in VMM: it listens on the socket
// path the variable names, says "ready", and holds until its stdin closes.
const helperEnv = "SPACE_BRIDGE_TEST_VMM"

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		os.Exit(standInVMM(path))
	}
	os.Exit(m.Run())
}

func standInVMM(path string) int {
	ln, err := unixsock.Listen(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ln.Close()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// startVMM runs a stand-in VMM process listening on path.
func startVMM(t *testing.T, path string) Process {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("stand-in VMM: %q, %v", line, err)
	}
	start, err := driver.ProcStartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return Process{Pid: cmd.Process.Pid, StartTime: start}
}

func self(t *testing.T) Process {
	t.Helper()
	start, err := driver.ProcStartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return Process{Pid: os.Getpid(), StartTime: start}
}

// listenAndDial listens on a fresh path in this process and returns both
// ends of one connection.
func listenAndDial(t *testing.T) (client, server net.Conn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "channel.sock")
	ln, err := unixsock.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = unixsock.Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestVerifyChannel(t *testing.T) {
	me := self(t)
	client, _ := listenAndDial(t)
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Skipf("needs sleep(1): %v", err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	sleeperStart, err := driver.ProcStartTime(sleeper.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		conn      net.Conn
		want      Process
		class     error
		mentioned []string
	}{
		{"the listener", client, me, nil, nil},
		{"another process", client, Process{sleeper.Process.Pid, sleeperStart}, errdefs.ErrPermissionDenied,
			[]string{fmt.Sprintf("peer is pid %d", me.Pid), fmt.Sprintf("VMM pid %d", sleeper.Process.Pid)}},
		{"reused pid", client, Process{me.Pid, me.StartTime + 1}, errdefs.ErrPermissionDenied, []string{"reused"}},
		{"no pid", client, Process{}, errdefs.ErrInvalidArgument, nil},
		{"not a unix socket", pipeConn(t), me, errdefs.ErrFailedPrecondition, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := VerifyChannel(tt.conn, tt.want)
			if tt.class == nil {
				if err != nil {
					t.Fatalf("VerifyChannel = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.class) {
				t.Fatalf("VerifyChannel = %v, want %v", err, tt.class)
			}
			for _, s := range tt.mentioned {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not mention %q", err, s)
				}
			}
		})
	}
}

func pipeConn(t *testing.T) net.Conn {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a
}

// TestPeerCredOfSocketpair documents why ns channels are not checked: both
// ends of a socketpair name the process that made it.
func TestPeerCredOfSocketpair(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		f := os.NewFile(uintptr(fd), "end")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		cred, err := PeerCred(c.(*net.UnixConn))
		c.Close()
		if err != nil || int(cred.Pid) != os.Getpid() {
			t.Errorf("socketpair peer = %+v, %v; want this process %d", cred, err, os.Getpid())
		}
	}
}

// TestNewRefusesAnotherProcessOnChannelPath: the VMM (a real process) bound
// the channel socket; another process removed it and bound the same path.
// The bridge is refused its channel before writing a byte to it, and says
// why in its exit file.
func TestNewRefusesAnotherProcessOnChannelPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "channel.sock")
	vmm := startVMM(t, path)

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	ln, err := unixsock.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	channel, err := unixsock.Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer channel.Close()
	impostorEnd, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer impostorEnd.Close()

	exitFile := filepath.Join(dir, "exit")
	b, err := New(Config{ExecID: "e1", Socket: filepath.Join(dir, "b.sock"), Channel: channel, ExitFile: exitFile, Guest: &vmm},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		b.client.Close()
		t.Fatal("bridge accepted a channel served by another process")
	}
	if !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("New = %v, want permission denied", err)
	}
	reason, _ := os.ReadFile(exitFile)
	for _, want := range []string{"guest channel refused", fmt.Sprintf("peer is pid %d", os.Getpid()), fmt.Sprintf("VMM pid %d", vmm.Pid)} {
		if !strings.Contains(string(reason), want) {
			t.Errorf("exit file %q lacks %q", reason, want)
		}
	}
	// Nothing reached the impostor.
	_ = impostorEnd.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := impostorEnd.Read(make([]byte, 64)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("impostor read %d bytes (%v), want none", n, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refusing bridge created its socket: %v", err)
	}
}

// TestVerifiedChannelServes: a channel whose peer is the expected VMM is
// served as before.
func TestVerifiedChannelServes(t *testing.T) {
	client, server := listenAndDial(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	guestDone := make(chan struct{})
	go func() {
		defer close(guestDone)
		_ = guestd.Serve(ctx, server, guestd.Config{}, log)
	}()
	me := self(t)
	sock := filepath.Join(t.TempDir(), "b.sock")
	b, err := New(Config{ExecID: "e1", Socket: sock, Channel: client, Guest: &me}, log)
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- b.Run(ctx) }()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return unixsock.Dial(ctx, sock)
	}}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st Status
		resp, err := hc.Get("http://bridge/bridge/v1/status")
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		if st.Ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("verified bridge not ready: %v %+v", err, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	hc.CloseIdleConnections()
	cancel()
	if err := <-runDone; err != nil {
		t.Errorf("Run = %v", err)
	}
	<-guestDone
}
