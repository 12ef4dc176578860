// Package python_test runs the Python SDK's pytest suite (sdk/python/tests)
// from `go test`, so that `make test` runs it: the unit tests against
// httpx's mock transport, and the integration tests against a real `space
// server --dev` this test starts (namespace sandboxes, the minimal
// template).
//
// pytest and httpx, pinned by requirements-test.txt, are installed with pip
// into a venv under $SPACE_TEST_CACHE_DIR once per content of that file, so
// runs after the first need no network. The SDK itself is imported from
// src/ (PYTHONPATH), the tree under test.
package python_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/testenv"
)

func TestPythonSDK(t *testing.T) {
	python := testenv.PythonVenv(t, "space-sandbox", "requirements-test.txt")
	t.Run("typecheck", func(t *testing.T) {
		// The package passes mypy's strict mode (it ships py.typed).
		cache := filepath.Join(filepath.Dir(python), "..", "mypy-cache")
		run(t, python, nil, "-m", "mypy", "--strict", "--cache-dir", cache, "src/space_sandbox")
	})
	t.Run("unit", func(t *testing.T) {
		pytest(t, python, nil, "tests/test_unit.py")
	})
	t.Run("server", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("the all-in-one server starts the root node-manager; run as root (CI does)")
		}
		srv := startServer(t, buildSpace(t))
		pytest(t, python, []string{"SPACE_API_URL=" + srv.url, "SPACE_API_KEY=" + srv.key, "SPACE_SDK_TEST_SERVER=1"}, "tests/test_server.py")
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
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
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

// server is one running `space server --dev`.
type server struct {
	url, key string
	mu       sync.Mutex
	log      bytes.Buffer
}

func (s *server) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log.Len() < 8<<20 {
		s.log.Write(p)
	}
	return len(p), nil
}

func (s *server) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.log.String()
	if len(out) > 20000 {
		out = "…" + out[len(out)-20000:]
	}
	return out
}

// buildSpace builds the host binaries and the guest daemon into a directory
// and returns it.
func buildSpace(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range [][]string{
		{"go", "build", "-o", filepath.Join(bin, "space"), "./cmd/space"},
		{"go", "build", "-o", filepath.Join(bin, "space-node-manager"), "./cmd/space-node-manager"},
		{"go", "build", "-o", filepath.Join(bin, "space-host-bridge"), "./cmd/space-host-bridge"},
		{"go", "build", "-tags", "osusergo,netgo", "-o", filepath.Join(bin, "space-guest"), "./cmd/space-guest"},
	} {
		cmd := exec.Command(step[0], step[1:]...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", step, err, out)
		}
	}
	return bin
}

// startServer starts the all-in-one server from bin on namespace sandboxes
// and waits until the minimal template is ready. Whatever a failed test left
// is deleted through the API, and the server stopped (SIGTERM), when the
// test ends.
func startServer(t *testing.T, bin string) *server {
	t.Helper()
	data := t.TempDir()
	srv := &server{}
	cmd := exec.Command(filepath.Join(bin, "space"), "server", "--dev", "--listen", "127.0.0.1:0", "--data-dir", data,
		"--no-base-template", "--kernel-build", "wait", "--default-runtime", "ns", "--snapshot-every", "0", "--full-snapshot-every", "0")
	cmd.Env = append(os.Environ(), "SPACE_DATA_DIR="+data)
	cmd.Stderr = srv
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		if srv.key != "" {
			srv.deleteAll()
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Errorf("server did not stop within 30s of SIGTERM")
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(3 * time.Minute)
	for srv.url == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("server exited before printing SPACE_API_URL:\n%s", srv.logs())
			}
			if v, ok := strings.CutPrefix(l, "SPACE_API_URL="); ok {
				srv.url = v
			}
		case <-deadline:
			t.Fatalf("server did not print SPACE_API_URL within 3m:\n%s", srv.logs())
		}
	}
	go func() {
		for range lines {
		}
	}()
	key, err := os.ReadFile(filepath.Join(data, "admin.key"))
	if err != nil {
		t.Fatalf("admin key: %v", err)
	}
	srv.key = strings.TrimSpace(string(key))
	srv.waitTemplate(t, "minimal")
	return srv
}

// deleteAll deletes every sandbox through the API.
func (s *server) deleteAll() {
	var list struct {
		Sandboxes []struct{ ID string }
	}
	if s.get("/v1/sandboxes", &list) != nil {
		return
	}
	for _, sb := range list.Sandboxes {
		req, _ := http.NewRequest("DELETE", s.url+"/v1/sandboxes/"+sb.ID, nil)
		req.Header.Set("Authorization", "Bearer "+s.key)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
}

// get reads an API path with the admin key into out.
func (s *server) get(path string, out any) error {
	req, _ := http.NewRequest("GET", s.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

// waitTemplate waits until template name is ready.
func (s *server) waitTemplate(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		var list struct {
			Templates []struct{ Name, State, Reason string }
		}
		if s.get("/v1/templates", &list) == nil {
			for _, tp := range list.Templates {
				if tp.Name == name && tp.State == "ready" {
					return
				}
				if tp.Name == name && tp.State == "failed" {
					t.Fatalf("template %s failed: %s", name, tp.Reason)
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("template %s not ready after 5m:\n%s", name, s.logs())
}
