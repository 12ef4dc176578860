package e2b_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/testenv/devserver"
)

// TestE2BMetricsAndBusy runs metrics.mjs (getMetrics: history, disk) and
// busy.mjs (429 with Retry-After, RateLimitError) with the published SDK
// against a real server on the ns runtime, and metrics.mjs on vm.
func TestE2BMetricsAndBusy(t *testing.T) {
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
	scripts := []string{"metrics.mjs", "busy.mjs"}
	for _, name := range append([]string{"lib.mjs", "package.json"}, scripts...) {
		copyFile(t, name, filepath.Join(work, name))
	}
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	bin := devserver.Build(t)
	t.Run("ns", func(t *testing.T) {
		srv := startServer(t, bin, "ns")
		for _, name := range scripts {
			t.Run(name[:len(name)-len(".mjs")], func(t *testing.T) { srv.runScript(t, work, name) })
		}
	})
	// The vm runtime's disk figures are its image's (the quotas and their
	// answers are the control plane's, the same on both).
	t.Run("vm", func(t *testing.T) {
		if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
			t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
		}
		startServer(t, bin, "vm").runScript(t, work, "metrics.mjs")
	})
}
