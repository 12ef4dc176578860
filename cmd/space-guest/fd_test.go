package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/guest"
)

// TestFDChannel runs the binary as the ns runtime does: the stream on fd 3.
// Children must not inherit it, and the daemon exits when the stream ends.
func TestFDChannel(t *testing.T) {
	bin := buildStatic(t)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	guestEnd, hostEnd := os.NewFile(uintptr(fds[0]), "guest"), os.NewFile(uintptr(fds[1]), "host")
	cmd := exec.Command(bin, "--channel", "fd:3")
	cmd.ExtraFiles = []*os.File{guestEnd}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start space-guest: %v", err)
	}
	guestEnd.Close()
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()

	conn, err := net.FileConn(hostEnd)
	hostEnd.Close()
	if err != nil {
		t.Fatal(err)
	}
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	out, end := shell(t, c, "for f in /proc/$$/fd/*; do echo \"$f $(readlink $f)\"; done; true")
	t.Logf("descriptors of a child: %s", out)
	if end.GetExitCode() != 0 || !strings.Contains(out, "pipe:") || strings.Contains(out, "socket:") {
		t.Errorf("a child's descriptors: %q (exit %d), want pipes and no socket (the channel must not leak)", out, end.GetExitCode())
	}
	c.Close()
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("space-guest exited with %v after the stream ended, want 0", waitErr)
		}
	case <-ctx.Done():
		t.Error("space-guest still runs after its stream ended")
	}
}
