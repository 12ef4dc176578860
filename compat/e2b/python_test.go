package e2b_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/testenv/devserver"
)

// pythonRuns are the published `e2b` Python SDKs (PyPI; every package of
// each pinned by its python/requirements-VERSION.txt) and the sections of
// python/sdk.py each runs, per runtime: the newest and one older, each on
// both runtimes, every section of the calls docs/e2b.md's Python table
// names (create, commands, pty, files, list, pause-connect, snapshot, fork,
// timeout, network, metrics); "fields", the request fields of the newest,
// on ns.
var pythonRuns = []struct {
	runtime, version string
	sections         []string
}{
	{"ns", "2.63", []string{"commands", "pty", "files", "lifecycle", "network", "fields", "hung"}},
	{"ns", "2.45", []string{"commands", "pty", "files", "lifecycle", "network"}},
	{"vm", "2.63", []string{"commands", "pty", "files", "lifecycle", "network", "hung"}},
	{"vm", "2.45", []string{"commands", "pty", "files", "lifecycle", "network"}},
}

// TestE2BPythonSDK runs the published e2b Python SDK, unmodified, against
// a real `space server --dev`, as TestE2BSDK runs the npm one: only
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (an E2B-shaped key) set.
func TestE2BPythonSDK(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the all-in-one server starts the root node-manager; run as root (CI does)")
	}
	pythons := map[string]string{}
	for _, r := range pythonRuns {
		if pythons[r.version] == "" {
			pythons[r.version] = testenv.PythonVenv(t, "e2b-"+r.version, filepath.Join("python", "requirements-"+r.version+".txt"))
		}
	}
	script, err := filepath.Abs("python/sdk.py")
	if err != nil {
		t.Fatal(err)
	}
	bin := devserver.Build(t)
	for _, runtime := range []string{"ns", "vm"} {
		t.Run(runtime, func(t *testing.T) {
			if _, err := exec.LookPath("qemu-system-x86_64"); runtime == "vm" && err != nil {
				t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
			}
			srv := startServer(t, bin, runtime)
			for _, r := range pythonRuns {
				if r.runtime != runtime {
					continue
				}
				t.Run("e2b-"+r.version, func(t *testing.T) {
					for _, section := range r.sections {
						t.Run(section, func(t *testing.T) { srv.runPython(t, pythons[r.version], script, section, r.version) })
					}
				})
			}
		})
	}
}

// runPython runs one section of python/sdk.py against srv.
func (s *server) runPython(t *testing.T, python, script, section, version string) {
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	args := []string{script}
	if section != "" {
		args = append(args, section)
	}
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Env = append(os.Environ(), "E2B_API_URL="+s.E2BAPI, "E2B_SANDBOX_URL="+s.E2BSandbox,
		"E2B_API_KEY="+s.e2bKey, "E2B_DOMAIN=localhost", "E2B_TEMPLATE=minimal", "SPACE_DATA_DIR="+s.DataDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	t.Logf("python sdk.py %s:\n%s", section, out)
	if err != nil {
		t.Errorf("python sdk.py %s (e2b %s): %v\nserver log:\n%s", section, version, err, s.Logs())
	}
}
