package server

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDepsNoGateway keeps the control plane apart from the node's data
// path: the sandbox CA it makes is internal/sandboxca's format, not the
// gateway's interception code.
func TestDepsNoGateway(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/spacesandbox/space/internal/gateway") {
			t.Errorf("internal/server imports %s; the control plane makes CAs with internal/sandboxca", dep)
		}
	}
}
