package guestd_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/internal/guest"
	"github.com/spacesandbox/space/internal/guestd"
)

// TestAutostart: the executables of the autostart directory start at Init,
// as Init's default user with Init's environment and the
// user's home as directory, and show in the process list under their tag;
// a file that is not executable and a dot file do not start, and a second
// Init while the entry runs starts it not again.
func TestAutostart(t *testing.T) {
	dir := t.TempDir()
	out := t.TempDir()
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	entry := func(name string, mode os.FileMode) {
		script := fmt.Sprintf("#!/bin/sh\necho \"$(id -un) $PWD $SPACE_MARK\" >> %s/%s\nexec sleep 300\n", out, name)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), mode); err != nil {
			t.Fatal(err)
		}
	}
	entry("service", 0o755)
	entry("plain", 0o644)
	entry(".hidden", 0o755)
	c := startGuest(t, guestd.Config{AutostartDir: dir})
	me := self(t)
	init := &controlv1.InitRequest{DefaultUser: me.Username, EnvVars: map[string]string{"SPACE_MARK": "marked"}}
	for range 2 {
		if _, err := c.Control().Init(testCtx(t), connect.NewRequest(init)); err != nil {
			t.Fatalf("Init: %v", err)
		}
	}
	want := me.Username + " " + me.HomeDir + " marked\n"
	deadline := time.Now().Add(20 * time.Second)
	var got []byte
	for time.Now().Before(deadline) {
		if got, _ = os.ReadFile(filepath.Join(out, "service")); len(got) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if string(got) != want {
		t.Fatalf("the autostart entry wrote %q, want %q", got, want)
	}
	for _, skipped := range []string{"plain", ".hidden"} {
		if _, err := os.Stat(filepath.Join(out, skipped)); err == nil {
			t.Errorf("entry %q started: only executable files not starting with a dot do", skipped)
		}
	}
	tags := processTags(t, c)
	if strings.Join(tags, ",") != "autostart:service" {
		t.Errorf("processes after two Inits: tags %q, want one autostart:service", tags)
	}
}

// TestAutostartReady: Init returns only once an entry that names a ready
// port listens there (this one listens after 300 ms).
func TestAutostartReady(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	script := fmt.Sprintf("#!/bin/sh\n# space-ready-port: %d\nsleep 0.3\nexec python3 -c 'import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"127.0.0.1\", %d)); s.listen(); time.sleep(300)'\n", port, port)
	if err := os.WriteFile(filepath.Join(dir, "listener"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := startGuest(t, guestd.Config{AutostartDir: dir})
	if _, err := c.Control().Init(testCtx(t), connect.NewRequest(&controlv1.InitRequest{DefaultUser: self(t).Username})); err != nil {
		t.Fatalf("Init: %v", err)
	}
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("the entry's port right after Init: %v (Init did not wait for it)", err)
	}
	conn.Close()
}

// processTags lists the daemon's processes and returns their tags, in the
// daemon's order.
func processTags(t *testing.T, c *guest.Client) []string {
	t.Helper()
	list, err := c.Process().List(testCtx(t), connect.NewRequest(&processv1.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, p := range list.Msg.GetProcesses() {
		tags = append(tags, p.GetTag())
	}
	return tags
}
