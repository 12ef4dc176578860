package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLauncherNamesMakeBuild runs `space node-manager` and `space
// host-bridge` with no binary beside `space`: each exits 1 naming the
// missing binary and `make build`, and starts nothing.
func TestLauncherNamesMakeBuild(t *testing.T) {
	bin := t.TempDir()
	space := filepath.Join(bin, "space")
	if out, err := exec.Command("go", "build", "-o", space, ".").CombinedOutput(); err != nil {
		t.Fatalf("build space: %v\n%s", err, out)
	}
	for verb, binary := range map[string]string{"node-manager": "space-node-manager", "host-bridge": "space-host-bridge"} {
		cmd := exec.Command(space, verb, "--help")
		cmd.Dir = bin
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("space %s = %v, want exit status 1; output:\n%s", verb, err, out)
		}
		for _, want := range []string{filepath.Join(bin, binary), "make build", "./cmd/" + binary} {
			if !strings.Contains(string(out), want) {
				t.Errorf("space %s output:\n%s\nwant %q", verb, out, want)
			}
		}
	}
	// With the binary beside it, the verb is that binary: its usage.
	if err := os.WriteFile(filepath.Join(bin, "space-host-bridge"), []byte("#!/bin/sh\necho bridge \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(space, "host-bridge", "--exec-id", "x").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "bridge --exec-id x" {
		t.Errorf("space host-bridge --exec-id x = %v, %q; want the sibling run with the arguments", err, out)
	}
}
