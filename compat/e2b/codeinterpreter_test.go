package e2b_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/testenv/devserver"
)

// TestCodeInterpreterSDK runs the published @e2b/code-interpreter SDK
// (pinned by codeinterpreter/package-lock.json) against a real server on
// the ns runtime: codeinterpreter.mjs creates a sandbox with the SDK's
// default template, which SPACE maps to its code-interpreter template, and
// drives SPACE's code interpreter server in it. The published Python SDKs
// (e2b-code-interpreter, the newest and one older) run python/codeinterpreter.py
// on that server, then on a second one whose sandboxes are microVMs (vm).
//
// The template is built here with `space template build code-interpreter
// --from builtin:code-interpreter`. Its Debian tree (debootstrap of python3 and
// the Jupyter stack, minutes and about 1.7 GB) is kept in the test cache
// ($SPACE_TEST_CACHE_DIR/templates): only the first run per cache pays for
// it, later ones copy the tree.
func TestCodeInterpreterSDK(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the all-in-one server starts the root node-manager; run as root (CI does)")
	}
	for _, tool := range []string{"node", "npm", "debootstrap"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: scripts/deps.sh test installs it (make test runs it)", tool)
		}
	}
	if cache := os.Getenv("SPACE_TEST_CACHE_DIR"); cache != "" {
		// The node-manager keeps the template's Debian tree there.
		t.Setenv("SPACE_CACHE_DIR", cache)
	}
	var modules string
	t.Run("install", func(t *testing.T) {
		t.Chdir("codeinterpreter")
		modules = installSDK(t)
	})
	if modules == "" {
		t.Fatal("the code-interpreter SDK is not installed")
	}
	work := t.TempDir()
	for _, name := range []string{"lib.mjs", "codeinterpreter.mjs"} {
		copyFile(t, name, filepath.Join(work, name))
	}
	copyFile(t, "codeinterpreter/package.json", filepath.Join(work, "package.json"))
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	bin := devserver.Build(t)
	srv := startServer(t, bin, "ns")
	buildCodeInterpreter(t, srv, bin)
	srv.runScript(t, work, "codeinterpreter.mjs")
	// The same template through the published Python SDK
	// (e2b-code-interpreter from PyPI, every package pinned): the newest
	// and one older.
	pythons := map[string]string{}
	for _, version := range codeInterpreterVersions {
		pythons[version] = testenv.PythonVenv(t, "e2b-ci-"+version, filepath.Join("python", "requirements-ci-"+version+".txt"))
	}
	runPythons := func(t *testing.T, srv *server) {
		script, err := filepath.Abs("python/codeinterpreter.py")
		if err != nil {
			t.Fatal(err)
		}
		for _, version := range codeInterpreterVersions {
			t.Run("python-"+version, func(t *testing.T) { srv.runPython(t, pythons[version], script, "", "code-interpreter "+version) })
		}
	}
	runPythons(t, srv)
	// The Python SDKs again on the vm runtime: a server whose sandboxes
	// are microVMs, the template built there.
	t.Run("vm", func(t *testing.T) {
		if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
			t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
		}
		vm := startServer(t, bin, "vm")
		buildCodeInterpreter(t, vm, bin)
		runPythons(t, vm)
	})
}

// codeInterpreterVersions are the published e2b-code-interpreter Python
// SDKs run against the template, each pinned by
// python/requirements-ci-VERSION.txt: the newest and one older.
var codeInterpreterVersions = []string{"2.11", "2.10"}

// buildCodeInterpreter builds the code-interpreter template on srv with
// `space template build code-interpreter --from builtin:code-interpreter`
// and waits until it is ready.
func buildCodeInterpreter(t *testing.T, srv *server, bin string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	build := exec.CommandContext(ctx, filepath.Join(bin, "space"), "template", "build", "code-interpreter", "--from", "builtin:code-interpreter")
	build.Env = append(os.Environ(), "SPACE_API_URL="+srv.URL, "SPACE_API_KEY="+srv.Key)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("space template build code-interpreter: %v\n%s\nserver log:\n%s", err, out, srv.Logs())
	}
	srv.WaitTemplate(t, "code-interpreter")
	t.Logf("template code-interpreter built in %v", time.Since(start).Round(time.Millisecond))
}
