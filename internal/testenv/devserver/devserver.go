// Package devserver builds SPACE's binaries from this source tree and runs
// `space server --dev` (control plane, node services and sandboxes in one
// process with its root node-manager) for the tests outside e2e that drive
// a real server from another program: the published E2B SDKs (compat/e2b)
// and SPACE's Python SDK (sdk/python). e2e has its own, richer harness
// (crashes, restarts, several nodes).
package devserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build builds space, space-node-manager, space-host-bridge and the static
// space-guest of this source tree into a temporary directory of t and
// returns it.
func Build(t testing.TB) string {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("devserver: cannot find its own source file")
	}
	root := filepath.Join(filepath.Dir(self), "..", "..", "..")
	bin := t.TempDir()
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

// Server is one running `space server --dev`.
type Server struct {
	// URL is the SPACE API; E2BAPI and E2BSandbox are E2B_API_URL and
	// E2B_SANDBOX_URL as the server prints them.
	URL, E2BAPI, E2BSandbox string
	// Key is the admin key of the server's data directory.
	Key string
	// Bin is the directory of the binaries it runs.
	Bin string
	// DataDir is the server's --data-dir (its nodes' state is under it).
	DataDir string

	mu  sync.Mutex
	log bytes.Buffer
}

// Write collects the server's log (its first 8 MiB).
func (s *Server) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log.Len() < 8<<20 {
		s.log.Write(p)
	}
	return len(p), nil
}

// Logs returns the end of the server's log.
func (s *Server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.log.String()
	if len(out) > 20000 {
		out = "…" + out[len(out)-20000:]
	}
	return out
}

// Start starts the server from bin with sandboxes on runtime by default,
// and extra flags, and waits until the minimal template and the runtime
// are ready. When t ends, whatever a failed test left is deleted through
// the API, as an operator would, and the server is stopped (SIGTERM).
func Start(t testing.TB, bin, runtime string, extra ...string) *Server {
	t.Helper()
	data := t.TempDir()
	srv := &Server{Bin: bin, DataDir: data}
	cmd := exec.Command(filepath.Join(bin, "space"), append([]string{"server", "--dev", "--listen", "127.0.0.1:0", "--data-dir", data,
		"--no-base-template", "--kernel-build", "wait", "--default-runtime", runtime, "--snapshot-every", "0", "--full-snapshot-every", "0"}, extra...)...)
	cmd.Env = append(os.Environ(), "SPACE_DATA_DIR="+data)
	cmd.Stderr = srv
	// The server's children (its node-manager) write to the same pipes:
	// one that outlives it must not keep Wait from returning.
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
		if srv.Key != "" {
			srv.DeleteAll()
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
	for srv.URL == "" || srv.E2BAPI == "" || srv.E2BSandbox == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("server exited before printing its URLs:\n%s", srv.Logs())
			}
			k, v, _ := strings.Cut(l, "=")
			switch k {
			case "SPACE_API_URL":
				srv.URL = v
			case "E2B_API_URL":
				srv.E2BAPI = v
			case "E2B_SANDBOX_URL":
				srv.E2BSandbox = v
			}
		case <-deadline:
			t.Fatalf("server did not print SPACE_API_URL, E2B_API_URL and E2B_SANDBOX_URL within 3m:\n%s", srv.Logs())
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
	srv.Key = strings.TrimSpace(string(key))
	srv.WaitTemplate(t, "minimal")
	srv.WaitRuntime(t, runtime)
	return srv
}

// DeleteAll deletes every sandbox through the API.
func (s *Server) DeleteAll() {
	var list struct {
		Sandboxes []struct{ ID string }
	}
	if s.Get("/v1/sandboxes", &list) != nil {
		return
	}
	for _, sb := range list.Sandboxes {
		req, _ := http.NewRequest("DELETE", s.URL+"/v1/sandboxes/"+sb.ID, nil)
		req.Header.Set("Authorization", "Bearer "+s.Key)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
}

// Get reads an API path with the admin key into out.
func (s *Server) Get(path string, out any) error {
	req, _ := http.NewRequest("GET", s.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

// WaitRuntime waits until a node offers runtime (the vm runtime comes once
// the node has its guest kernel).
func (s *Server) WaitRuntime(t testing.TB, runtime string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		var list struct {
			Nodes []struct{ Runtimes []string }
		}
		if s.Get("/v1/nodes", &list) == nil {
			for _, n := range list.Nodes {
				for _, rt := range n.Runtimes {
					if rt == runtime {
						return
					}
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no node offers the %s runtime after 5m:\n%s", runtime, s.Logs())
}

// WaitTemplate waits until template name is ready.
func (s *Server) WaitTemplate(t testing.TB, name string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		var list struct {
			Templates []struct{ Name, State, Reason string }
		}
		if s.Get("/v1/templates", &list) == nil {
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
	t.Fatalf("template %s not ready after 5m:\n%s", name, s.Logs())
}

// WaitNoMemoryPressure waits (up to limit) until no node reports memory
// pressure, so that the creates a test makes next are placed: a template
// build copying a big tree can push a small, shared host's memory PSI over
// the node's threshold for a while, and a create in that window is refused
// with 503 as it should be. It returns the pressure still reported when
// limit passed ("" when none).
func (s *Server) WaitNoMemoryPressure(t testing.TB, limit time.Duration) string {
	t.Helper()
	last := ""
	for deadline := time.Now().Add(limit); ; time.Sleep(time.Second) {
		var list struct {
			Nodes []struct {
				MemoryPressure string `json:"memory_pressure"`
			}
		}
		if err := s.Get("/v1/nodes", &list); err == nil {
			last = ""
			for _, n := range list.Nodes {
				if n.MemoryPressure != "" {
					last = n.MemoryPressure
				}
			}
			if last == "" {
				return ""
			}
		}
		if time.Now().After(deadline) {
			return last
		}
	}
}
