package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/internal/guest"
)

// startInNamespace runs the built daemon as PID 1 of new namespaces (unshare
// flags) on a unix channel and returns a client; everything is killed when
// the test ends (--kill-child, and PID 1's death empties the namespace).
func startInNamespace(t *testing.T, flags ...string) *guest.Client {
	t.Helper()
	return startBinInNamespace(t, "", flags...)
}

// startBinInNamespace is startInNamespace with the daemon binary bin ("":
// buildStatic's).
func startBinInNamespace(t *testing.T, bin string, flags ...string) *guest.Client {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the daemon as PID 1 of a new PID namespace")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	if bin == "" {
		bin = buildStatic(t)
	}
	sock := filepath.Join(t.TempDir(), "guest.sock")
	args := append(append([]string{"--fork", "--kill-child", "--pid", "--mount-proc"}, flags...), bin, "--channel", "unix:"+sock)
	cmd := exec.Command("unshare", args...)
	cmd.Stderr = os.Stderr
	if !testing.Verbose() {
		cmd.Stderr = nil
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var conn net.Conn
	for {
		var err error
		if conn, err = net.Dial("unix", sock); err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("daemon exited before listening on %s", sock)
		case <-ctx.Done():
			t.Fatalf("daemon did not listen on %s: %v", sock, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return c
}

func shell(t *testing.T, c *guest.Client, script string) (string, *processv1.ProcessEvent_EndEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.Process().Start(ctx, connect.NewRequest(&processv1.StartRequest{
		Process: &processv1.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}},
	}))
	if err != nil {
		t.Fatalf("Start %q: %v", script, err)
	}
	var out strings.Builder
	var end *processv1.ProcessEvent_EndEvent
	for stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetStdout())
		if e := stream.Msg().GetEvent().GetEnd(); e != nil {
			end = e
		}
	}
	if end == nil {
		t.Fatalf("%q: no end event: %v", script, stream.Err())
	}
	return out.String(), end
}

// TestPID1ReapsOrphansKeepsStatuses: as PID 1 the daemon reaps a
// double-forked orphan and still reports every own child's exit code.
func TestPID1ReapsOrphansKeepsStatuses(t *testing.T) {
	c := startInNamespace(t)
	if out, _ := shell(t, c, "echo $$; cat /proc/1/cmdline | tr '\\0' ' '"); !strings.Contains(out, "space-guest") {
		t.Fatalf("PID 1 in the namespace is %q, want space-guest", out)
	}
	for i := 0; i < 20; i++ {
		if _, end := shell(t, c, "exit "+strconv.Itoa(i)); end.GetExitCode() != int32(i) || !end.GetExited() {
			t.Fatalf("exit %d reported as %v", i, end)
		}
	}
	marker := filepath.Join(t.TempDir(), "orphan-done")
	// The subshell forks a grandchild and exits: the grandchild is re-parented
	// to PID 1, exits later, and must not stay a zombie.
	if _, end := shell(t, c, "(sh -c 'sleep 0.2; touch "+marker+"' &) ; exit 7"); end.GetExitCode() != 7 {
		t.Fatalf("double fork parent: %v, want exit 7", end)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("orphan never ran")
		case <-time.After(20 * time.Millisecond):
		}
	}
	for {
		out, _ := shell(t, c, "for s in /proc/[0-9]*/stat; do cut -d' ' -f1-3 $s; done 2>/dev/null | awk '$3 == \"Z\"'")
		if strings.TrimSpace(out) == "" {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("zombies left in the namespace: %s", out)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestUserNamespaceClockAndReseed: in a user namespace (no CAP_SYS_TIME or
// CAP_SYS_ADMIN over the host) SetClock answers FailedPrecondition, Reseed
// falls back to writing, and Init sets the hostname of the UTS namespace.
func TestUserNamespaceClockAndReseed(t *testing.T) {
	c := startInNamespace(t, "--user", "--map-root-user", "--uts")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Control().SetClock(ctx, connect.NewRequest(&controlv1.SetClockRequest{Now: timestamppb.Now()}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "shares the host clock") {
		t.Errorf("SetClock in a user namespace: %v, want FailedPrecondition about the shared host clock", err)
	}
	resp, err := c.Control().Init(ctx, connect.NewRequest(&controlv1.InitRequest{
		SandboxId: "sbx", Hostname: "sbx-host", Entropy: []byte("entropy"), Now: timestamppb.Now(),
	}))
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	m := resp.Msg
	if m.GetReseed() != controlv1.ReseedMethod_RESEED_METHOD_WRITE || m.GetClockSet() || m.GetClockError() == "" || !m.GetHostnameSet() {
		t.Errorf("Init = %v, want reseed by write, clock not set with a reason, hostname set", m)
	}
	if out, _ := shell(t, c, "cat /proc/sys/kernel/hostname"); strings.TrimSpace(out) != "sbx-host" {
		t.Errorf("hostname in the sandbox = %q, want sbx-host", out)
	}
}
