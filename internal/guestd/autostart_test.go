package guestd_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
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
	list, err := c.Process().List(testCtx(t), connect.NewRequest(&processv1.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, p := range list.Msg.GetProcesses() {
		tags = append(tags, p.GetTag())
	}
	if strings.Join(tags, ",") != "autostart:service" {
		t.Errorf("processes after two Inits: tags %q, want one autostart:service", tags)
	}
}
