package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDynamicGuestRefusedAtStart starts the real `space` binary (and through
// it space-node-manager, beside it) with a
// dynamically linked space-guest (/bin/true) beside it: `space server
// --dev` and `space node-manager` exit at once with the build command, and
// nothing is started (the data directory gets no database, no socket).
func TestDynamicGuestRefusedAtStart(t *testing.T) {
	if _, err := os.Stat("/bin/true"); err != nil {
		t.Skip("needs /bin/true as a dynamically linked program")
	}
	bin := t.TempDir()
	space := filepath.Join(bin, "space")
	for _, pkg := range []string{".", "../space-node-manager", "../space-host-bridge"} {
		out := filepath.Join(bin, filepath.Base(pkg))
		if pkg == "." {
			out = space
		}
		if out, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	dynamic, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "space-guest"), dynamic, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := [][]string{
		{"server", "--dev", "--listen", "127.0.0.1:0", "--no-base-template"},
	}
	if os.Geteuid() == 0 {
		cases = append(cases, []string{"node-manager"})
	} else {
		t.Log("not root: only `space server --dev` is checked (node-manager refuses non-root first)")
	}
	for _, args := range cases {
		t.Run(args[0], func(t *testing.T) {
			data := t.TempDir()
			var stderr bytes.Buffer
			// A refusal is immediate; the bound only turns a server that
			// started anyway into a failure instead of a hang.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, space, append(args, "--data-dir", data)...)
			cmd.WaitDelay = 5 * time.Second
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("space %s = %v, want exit status 1; stderr:\n%s", args[0], err, &stderr)
			}
			for _, want := range []string{"is dynamically linked", "make build", "CGO_ENABLED=0 go build -tags osusergo,netgo -o bin/space-guest ./cmd/space-guest"} {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("space %s stderr:\n%s\nwant %q", args[0], &stderr, want)
				}
			}
			if left, _ := os.ReadDir(data); len(left) != 0 {
				t.Errorf("space %s left %d entries in its data directory (%s...): it started before refusing", args[0], len(left), left[0].Name())
			}
		})
	}
}
