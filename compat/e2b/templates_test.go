package e2b_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/testenv/devserver"
)

// TestE2BTemplateBuild runs templates.mjs (Template.build through /e2b:
// steps, uploads, logs, readyCmd, BuildError with the step, refusals) with
// the published SDK on ns sandboxes.
func TestE2BTemplateBuild(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the all-in-one server starts the root node-manager; run as root (CI does)")
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: scripts/deps.sh test installs Node.js and npm (make test runs it)", tool)
		}
	}
	modules := installSDK(t)
	work := t.TempDir()
	for _, name := range []string{"lib.mjs", "package.json", "templates.mjs"} {
		copyFile(t, name, filepath.Join(work, name))
	}
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, devserver.Build(t), "ns")
	srv.runScript(t, work, "templates.mjs")
}
