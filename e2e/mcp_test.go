package e2e

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/testenv"
	space "github.com/spacesandbox/space/sdk/go"
)

// TestMCP drives `space mcp` with the official MCP Python client (the `mcp`
// package from PyPI, every package pinned by testdata/mcp/requirements.txt)
// over stdio and streamable HTTP against a real server: the tools create a
// sandbox, run commands, move files, snapshot, fork, expose a port, pause
// and delete, answer the API's errors and refuse bad arguments as tool
// errors, and another tenant's key reaches none of it; run_code streams a
// code-interpreter sandbox's output as progress notifications and the
// code_context_* tools keep a context's state apart, list, restart and
// delete it (testdata/mcp/client.py).
func TestMCP(t *testing.T) {
	python := testenv.PythonVenv(t, "mcp", "testdata/mcp/requirements.txt")
	// The code-interpreter template run_code needs is built from the
	// Debian tree kept in $SPACE_TEST_CACHE_DIR (as TestRunCode does).
	in := startServerEnv(t, newDataDir(t), templateCacheEnv())
	defer in.stop()
	out, errOut, code := in.cli("", "tenant", "create", "mcp-other")
	if code != 0 {
		t.Fatalf("tenant create: %d %s", code, errOut)
	}
	other := strings.TrimSpace(out)
	script, err := filepath.Abs("testdata/mcp/client.py")
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "SPACE_API_URL="+in.url, "SPACE_API_KEY="+in.key, "OTHER_KEY="+other)
	run := func(t *testing.T, args ...string) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, python, append([]string{script}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("client.py %v: %v\n%s\nserver log:\n%s", args, err, out, in.logs())
		}
		t.Logf("client.py %v: %s", args, out)
	}
	t.Run("stdio", func(t *testing.T) { run(t, "stdio", bin.space) })
	t.Run("run_code", func(t *testing.T) {
		in.buildCodeInterpreter(t)
		var sb sandbox
		if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "code-interpreter", "runtime": "ns", "memory_mib": 1024}, &sb); code != http.StatusCreated {
			t.Fatalf("create: HTTP %d\n%s", code, in.logs())
		}
		defer in.delete(sb.ID)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		if _, err := space.NewClient(in.url, in.key).WaitForState(ctx, sb.ID, sandboxv1.StateRunning); err != nil {
			t.Fatal(err)
		}
		run(t, "code", bin.space, sb.ID)
	})
	t.Run("http", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		cmd := exec.CommandContext(ctx, bin.space, "mcp", "--http", "127.0.0.1:0")
		// The HTTP transport has no key of its own: each request brings one.
		cmd.Env = append(os.Environ(), "SPACE_API_URL="+in.url, "SPACE_API_KEY=")
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); _ = cmd.Wait() }()
		sc := bufio.NewScanner(stderr)
		var url string
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "serving "); ok {
				url, _, _ = strings.Cut(rest, " ")
				break
			}
		}
		if url == "" {
			t.Fatal("space mcp --http did not say where it serves")
		}
		go func() {
			for sc.Scan() {
			}
		}()
		run(t, "http", url)
	})
}
