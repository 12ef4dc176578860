package e2b_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/testenv/devserver"
)

// TestCodeInterpreterSDK runs the published @e2b/code-interpreter SDK
// (pinned by codeinterpreter/package-lock.json) against real servers, one
// on the ns runtime and one on vm, side by side (the vm one is mostly TCG
// time): codeinterpreter.mjs (ns) drives every call of the SDK,
// codeinterpreter_life.mjs (both) state across calls, a PNG chart, an error
// and state across pause and resume in one sandbox; the published Python
// SDKs (e2b-code-interpreter, the newest and one older) run
// python/codeinterpreter.py on both. The sandboxes are created with the
// SDK's default template, which SPACE maps to its code-interpreter template.
//
// The template is built on each server with `space template build
// code-interpreter --from builtin:code-interpreter`. Its Debian tree
// (debootstrap of python3 and the Jupyter stack, minutes and about 1.7 GB)
// is kept in the test cache ($SPACE_TEST_CACHE_DIR/templates): only the
// first run per cache pays for it, later ones copy the tree.
// SPACE_TEST_RUNCODE_RUNTIMES (e.g. "ns") narrows the runtimes.
func TestCodeInterpreterSDK(t *testing.T) {
	env := codeInterpreterEnv(t)
	runtimes := []string{"ns", "vm"}
	if only := os.Getenv("SPACE_TEST_RUNCODE_RUNTIMES"); only != "" {
		runtimes = strings.Split(only, ",")
	}
	t.Run("runtime", func(t *testing.T) {
		for _, rt := range runtimes {
			t.Run(rt, func(t *testing.T) {
				t.Parallel()
				srv := env.server(t, rt)
				if rt == "ns" {
					srv.runScript(t, env.work, "codeinterpreter.mjs")
				}
				srv.runScriptEnv(t, env.work, "codeinterpreter_life.mjs", "E2B_RUNTIME="+rt)
				// The same template through the published Python SDKs
				// (e2b-code-interpreter from PyPI, every package pinned).
				script, err := filepath.Abs("python/codeinterpreter.py")
				if err != nil {
					t.Fatal(err)
				}
				for _, version := range codeInterpreterVersions {
					t.Run("python-"+version, func(t *testing.T) {
						python := testenv.PythonVenv(t, "e2b-ci-"+version, filepath.Join("python", "requirements-ci-"+version+".txt"))
						srv.runPython(t, python, script, "", "code-interpreter "+version)
					})
				}
			})
		}
	})
}

// codeInterpreterVersions are the published e2b-code-interpreter Python
// SDKs run against the template, each pinned by
// python/requirements-ci-VERSION.txt: the newest and one older.
var codeInterpreterVersions = []string{"2.11", "2.10"}

// ciEnv is what the code-interpreter scripts need: the SDK installed, a
// work directory holding the scripts, and the server's binaries.
type ciEnv struct {
	work, bin string
}

func codeInterpreterEnv(t testing.TB) ciEnv {
	t.Helper()
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
	t.Chdir("codeinterpreter")
	modules := installSDK(t)
	t.Chdir("..")
	work := t.TempDir()
	for _, name := range []string{"lib.mjs", "codeinterpreter.mjs", "codeinterpreter_life.mjs"} {
		copyFile(t, name, filepath.Join(work, name))
	}
	copyFile(t, "codeinterpreter/package.json", filepath.Join(work, "package.json"))
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return ciEnv{work: work, bin: devserver.Build(t)}
}

// server starts a server on runtime rt (extra: more flags) and builds the
// code-interpreter template on it.
func (e ciEnv) server(t testing.TB, rt string, extra ...string) *server {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); rt == "vm" && err != nil {
		t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
	}
	srv := startServer(t, e.bin, rt, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	build := exec.CommandContext(ctx, filepath.Join(e.bin, "space"), "template", "build", "code-interpreter", "--from", "builtin:code-interpreter")
	build.Env = append(os.Environ(), "SPACE_API_URL="+srv.URL, "SPACE_API_KEY="+srv.Key)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("space template build code-interpreter (%s): %v\n%s\nserver log:\n%s", rt, err, out, srv.Logs())
	}
	srv.WaitTemplate(t, "code-interpreter")
	t.Logf("%s: template code-interpreter built in %v", rt, time.Since(start).Round(time.Millisecond))
	// The build copied 1.3 GB: on a small shared host the node can be under
	// memory pressure for a while after, refusing creates (503).
	if p := srv.WaitNoMemoryPressure(t, 3*time.Minute); p != "" {
		t.Logf("%s: the node still reports memory pressure 3m after the build (%s); the creates may be refused", rt, p)
	}
	return srv
}
