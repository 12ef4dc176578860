// Package python_test runs the Python SDK's pytest suite (sdk/python/tests)
// from `go test`, so that `make test` runs it: the unit tests against
// httpx's mock transport, and the integration tests against a real `space
// server --dev` this test starts (namespace sandboxes, the minimal
// template, and the code-interpreter one for run_code).
//
// pytest, httpx, mypy, ruff and pdoc, pinned by requirements-test.txt, are
// installed with pip into a venv under $SPACE_TEST_CACHE_DIR once per
// content of that file, so runs after the first need no network. The SDK itself is imported from
// src/ (PYTHONPATH), the tree under test.
package python_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/testenv/devserver"
)

func TestPythonSDK(t *testing.T) {
	python := testenv.PythonVenv(t, "space-sandbox", "requirements-test.txt")
	t.Run("typecheck", func(t *testing.T) {
		// The package passes mypy's strict mode (it ships py.typed).
		cache := filepath.Join(filepath.Dir(python), "..", "mypy-cache")
		run(t, python, nil, "-m", "mypy", "--strict", "--cache-dir", cache, "src/space_sandbox")
	})
	t.Run("lint", func(t *testing.T) {
		// ruff with the rules of pyproject.toml, over the package, its
		// tests and scripts.
		run(t, python, []string{"RUFF_CACHE_DIR=" + filepath.Join(filepath.Dir(python), "..", "ruff-cache")}, "-m", "ruff", "check", "src", "tests", "scripts")
	})
	t.Run("reference", func(t *testing.T) {
		// The API reference renders from the docstrings: every public name
		// has an entry and every cross-reference names something. `make
		// python-docs` writes it to docs/python/ (SPACE_PYTHON_DOCS_OUT).
		out := os.Getenv("SPACE_PYTHON_DOCS_OUT")
		if out == "" {
			out = t.TempDir()
		}
		run(t, python, nil, "scripts/reference.py", out)
	})
	t.Run("unit", func(t *testing.T) {
		pytest(t, python, nil, "tests/test_unit.py")
	})
	t.Run("server", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("the all-in-one server starts the root node-manager; run as root (CI does)")
		}
		// The code-interpreter template (tests/test_server_code.py) is built
		// from the Debian tree kept in $SPACE_TEST_CACHE_DIR, as e2e
		// TestRunCode builds it.
		if cache := os.Getenv("SPACE_TEST_CACHE_DIR"); cache != "" {
			t.Setenv("SPACE_CACHE_DIR", cache)
		}
		srv := devserver.Start(t, devserver.Build(t), "ns")
		pytest(t, python, []string{"SPACE_API_URL=" + srv.URL, "SPACE_API_KEY=" + srv.Key, "SPACE_SDK_TEST_SERVER=1"}, "tests/test_server.py", "tests/test_server_admin.py", "tests/test_server_vm.py", "tests/test_server_code.py")
	})
}

// pytest runs the named test files with python, failing t when pytest does.
func pytest(t *testing.T, python string, env []string, files ...string) {
	t.Helper()
	run(t, python, env, append([]string{"-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"}, files...)...)
}

// run runs python with args in this directory, the SDK importable from src,
// failing t when it fails.
func run(t *testing.T, python string, env []string, args ...string) {
	t.Helper()
	// A backstop, not a measure: the server files include microVMs under
	// emulation (TCG) and 100 MiB streams, on a shared machine.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	src, err := filepath.Abs("src")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Env = append(append(os.Environ(), "PYTHONPATH="+src, "PYTHONDONTWRITEBYTECODE=1"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("python %s:\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("python %s: %v", strings.Join(args, " "), err)
	}
}
