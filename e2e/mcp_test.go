package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMCP drives `space mcp` with the official MCP Python client (the `mcp`
// package from PyPI, every package pinned by testdata/mcp/requirements.txt)
// over stdio and streamable HTTP against a real server: the tools create a
// sandbox, run commands, move files, snapshot, fork, expose a port, pause
// and delete, answer the API's errors and refuse bad arguments as tool
// errors, and another tenant's key reaches none of it (testdata/mcp/client.py).
func TestMCP(t *testing.T) {
	python := mcpPython(t)
	in := startServer(t, newDataDir(t))
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

// mcpPython returns the python of a virtual environment with the packages
// of testdata/mcp/requirements.txt, made once per requirements file in the
// test cache (SPACE_TEST_CACHE_DIR).
func mcpPython(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is not installed (scripts/deps.sh test installs it; make test runs it)")
	}
	req, err := os.ReadFile("testdata/mcp/requirements.txt")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(req)
	root := os.Getenv("SPACE_TEST_CACHE_DIR")
	if root == "" {
		if root, err = os.UserCacheDir(); err != nil {
			root = os.TempDir()
		}
		root = filepath.Join(root, "space")
	}
	dir := filepath.Join(root, "mcp-python", hex.EncodeToString(sum[:8]))
	python := filepath.Join(dir, "bin", "python")
	if _, err := os.Stat(filepath.Join(dir, ".installed")); err == nil {
		return python
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	// A venv's scripts name its path: it is made in place, and marked
	// installed only once pip has finished.
	_ = os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	for _, step := range [][]string{
		{"python3", "-m", "venv", dir},
		{python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "-r", "testdata/mcp/requirements.txt"},
	} {
		if out, err := exec.CommandContext(ctx, step[0], step[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v (the MCP Python client, pinned by testdata/mcp/requirements.txt): %v\n%s", step, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".installed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return python
}
