// Package e2b_test runs the published `e2b` npm SDK, unmodified, against a
// real `space server --dev` (control plane, node services, sandboxes on the
// ns runtime and, where QEMU is installed, the vm runtime, and their guest
// daemons): the scripts beside this file create sandboxes, run
// commands and PTYs, move files, pause, connect, snapshot, fork and kill
// through the SDK, with only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY
// set (docs/e2b.md).
//
// The SDK's version is pinned by package-lock.json; `npm ci` installs it
// once per lockfile into $SPACE_TEST_CACHE_DIR (the cache `make test` keeps
// the guest kernel in), so runs after the first need no network.
package e2b_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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
)

// runs are the server configurations and the scripts run against each:
// every script on namespace sandboxes, and on microVMs the ones whose
// behaviour depends on the runtime (pause keeps memory, a fork carries the
// parent's processes, guest ports are reached over the VM's network, files
// and their metadata xattrs live on the VM's own file system).
// One script alone: go test ./compat/e2b/ -run 'TestE2BSDK/ns/ports' -v.
var runs = []struct {
	runtime string
	scripts []string
}{
	{"ns", []string{"commands.mjs", "files.mjs", "lifecycle.mjs", "errors.mjs", "ports.mjs", "keys.mjs"}},
	{"vm", []string{"commands.mjs", "files.mjs", "lifecycle.mjs", "ports.mjs"}},
}

func TestE2BSDK(t *testing.T) {
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
	for _, name := range []string{"lib.mjs", "package.json", "commands.mjs", "files.mjs", "lifecycle.mjs", "errors.mjs", "ports.mjs", "keys.mjs"} {
		copyFile(t, name, filepath.Join(work, name))
	}
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	bin := buildSpace(t)
	for _, run := range runs {
		t.Run(run.runtime, func(t *testing.T) {
			if _, err := exec.LookPath("qemu-system-x86_64"); run.runtime == "vm" && err != nil {
				t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
			}
			srv := startServer(t, bin, run.runtime)
			for _, name := range run.scripts {
				t.Run(strings.TrimSuffix(name, ".mjs"), func(t *testing.T) { srv.runScript(t, work, name) })
			}
		})
	}
}

// runScript runs one SDK script against srv.
func (s *server) runScript(t *testing.T, work, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", name)
	cmd.Dir = work
	key := s.key
	if name == "keys.mjs" || name == "network.mjs" { // E2B's shape, for the SDK that checks it (2.45)
		key = s.e2bKey
	}
	cmd.Env = append(os.Environ(),
		"E2B_API_URL="+s.e2bAPI, "E2B_SANDBOX_URL="+s.e2bSandbox, "E2B_API_KEY="+key, "SPACE_KEY="+s.key,
		"E2B_DOMAIN=localhost", "E2B_TEMPLATE=minimal")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	t.Logf("node %s:\n%s", name, out)
	if err != nil {
		t.Errorf("node %s: %v\nserver log:\n%s", name, err, s.logs())
	}
}

// installSDK runs `npm ci` for package-lock.json into the cache, once per
// lockfile content, and returns the node_modules directory.
func installSDK(t *testing.T) string {
	t.Helper()
	lock, err := os.ReadFile("package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := os.ReadFile("package.json")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append(append([]byte{}, pkg...), lock...))
	root := os.Getenv("SPACE_TEST_CACHE_DIR")
	if root == "" {
		if root, err = os.UserCacheDir(); err != nil {
			root = os.TempDir()
		}
		root = filepath.Join(root, "space")
	}
	dir := filepath.Join(root, "e2b-sdk", hex.EncodeToString(sum[:8]))
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "e2b", "package.json")); err == nil {
		return modules
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	// Install beside the final place and rename it there, so that an
	// interrupted install is never taken for a finished one.
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for name, data := range map[string][]byte{"package.json": pkg, "package-lock.json": lock} {
		if err := os.WriteFile(filepath.Join(tmp, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(root, "npm-cache"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci (the e2b SDK, pinned by package-lock.json): %v\n%s", err, out)
	}
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		if _, statErr := os.Stat(filepath.Join(modules, "e2b", "package.json")); statErr != nil {
			t.Fatalf("keep the installed SDK: %v", err)
		}
	}
	return modules
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// server is one running `space server --dev`.
type server struct {
	spaceAPI, e2bAPI, e2bSandbox string
	key                          string
	e2bKey                       string // `space key create --e2b`
	mu                           sync.Mutex
	log                          bytes.Buffer
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

// buildSpace builds space and space-guest into a directory and returns it.
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

// startServer starts the all-in-one server from bin, creating sandboxes on
// runtime (extra: more flags), and waits until the minimal template and the
// runtime are ready.
// It is stopped (SIGTERM) when the test ends.
func startServer(t *testing.T, bin, runtime string, extra ...string) *server {
	t.Helper()
	data := t.TempDir()
	srv := &server{}
	cmd := exec.Command(filepath.Join(bin, "space"), append([]string{"server", "--dev", "--listen", "127.0.0.1:0", "--data-dir", data,
		"--no-base-template", "--kernel-build", "wait", "--default-runtime", runtime, "--snapshot-every", "0", "--full-snapshot-every", "0"}, extra...)...)
	cmd.Env = append(os.Environ(), "SPACE_DATA_DIR="+data)
	cmd.Stderr = srv
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
		// Whatever a failed script left, delete it through the API before
		// stopping, as an operator would.
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
	for srv.spaceAPI == "" || srv.e2bAPI == "" || srv.e2bSandbox == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("server exited before printing its URLs:\n%s", srv.logs())
			}
			k, v, _ := strings.Cut(l, "=")
			switch k {
			case "SPACE_API_URL":
				srv.spaceAPI = v
			case "E2B_API_URL":
				srv.e2bAPI = v
			case "E2B_SANDBOX_URL":
				srv.e2bSandbox = v
			}
		case <-deadline:
			t.Fatalf("server did not print SPACE_API_URL, E2B_API_URL and E2B_SANDBOX_URL within 3m:\n%s", srv.logs())
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
	mint := exec.Command(filepath.Join(bin, "space"), "key", "create", "--e2b")
	mint.Env = append(os.Environ(), "SPACE_API_URL="+srv.spaceAPI, "SPACE_API_KEY="+srv.key)
	out, err := mint.Output()
	if err != nil {
		t.Fatalf("space key create --e2b: %v\n%s", err, out)
	}
	srv.e2bKey = strings.TrimSpace(string(out))
	srv.waitTemplate(t, "minimal")
	srv.waitRuntime(t, runtime)
	return srv
}

// deleteAll deletes every sandbox through the SPACE API.
func (s *server) deleteAll() {
	var list struct {
		Sandboxes []struct{ ID string }
	}
	if s.get("/v1/sandboxes", &list) != nil {
		return
	}
	for _, sb := range list.Sandboxes {
		req, _ := http.NewRequest("DELETE", s.spaceAPI+"/v1/sandboxes/"+sb.ID, nil)
		req.Header.Set("Authorization", "Bearer "+s.key)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
}

// get reads a SPACE API path with the admin key into out.
func (s *server) get(path string, out any) error {
	req, _ := http.NewRequest("GET", s.spaceAPI+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

// waitRuntime waits until a node offers runtime (the vm runtime comes once
// the node has its guest kernel).
func (s *server) waitRuntime(t *testing.T, runtime string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		var list struct {
			Nodes []struct{ Runtimes []string }
		}
		if s.get("/v1/nodes", &list) == nil {
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
	t.Fatalf("no node offers the %s runtime after 5m:\n%s", runtime, s.logs())
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
