package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps: space (the CLI, the control plane and the unprivileged sandbox
// manager) does not link the node-manager's privileged server nor the ns
// runtime that only it runs; it calls them through internal/privop.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"internal/nodemanager", "internal/driver/ns", "internal/volume/localvol"} {
			if dep == "github.com/spacesandbox/space/"+banned {
				t.Errorf("space imports %s: the node-manager's, not the sandbox manager's", dep)
			}
		}
	}
}
