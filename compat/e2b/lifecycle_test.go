package e2b_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/testenv/devserver"
)

// TestE2BLifecycleSDK runs e2blife.mjs, E2B's lifecycle controls
// (onTimeout "pause" with and without autoResume, pause without memory,
// onResume "reboot") and named snapshots, through the published SDK on ns
// sandboxes and, where QEMU is installed, on microVMs (pause keeps a VM's
// memory, a stop its disk).
func TestE2BLifecycleSDK(t *testing.T) {
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
	for _, name := range []string{"lib.mjs", "package.json", "e2blife.mjs"} {
		copyFile(t, name, filepath.Join(work, name))
	}
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	bin := devserver.Build(t)
	for _, runtime := range []string{"ns", "vm"} {
		t.Run(runtime, func(t *testing.T) {
			if _, err := exec.LookPath("qemu-system-x86_64"); runtime == "vm" && err != nil {
				t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
			}
			startServer(t, bin, runtime).runScript(t, work, "e2blife.mjs")
		})
	}
}
