package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/testenv"
)

// TestMCP drives `space mcp` with the official MCP Python client (the `mcp`
// package from PyPI, every package pinned by testdata/mcp/requirements.txt)
// over stdio and streamable HTTP against a real server: the tools create a
// sandbox, run commands, move files, snapshot, fork, expose a port, pause
// and delete, answer the API's errors and refuse bad arguments as tool
// errors, and another tenant's key reaches none of it (testdata/mcp/client.py).
func TestMCP(t *testing.T) {
	python := testenv.PythonVenv(t, "mcp", "testdata/mcp/requirements.txt")
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
