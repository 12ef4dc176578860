package nodev1

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNothingOfTheServer: the node API's packages (this one, the
// generated ones) import nothing of SPACE but the api module: both ends,
// and any other client, build against the contract alone.
func TestImportsNothingOfTheServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/spacesandbox/space/") && !strings.HasPrefix(pkg, "github.com/spacesandbox/space/api/") {
			t.Errorf("api/node/v1 depends on %s: the contract must not import server or node code", pkg)
		}
	}
}
