// Package e2e drives a real `space server --dev` — control plane, node services,
// node-manager, host bridges, ns sandboxes and their guest daemons — through the
// CLI and the REST API, as a user would.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

// bin holds the binaries built once for the whole package.
var bin struct {
	dir   string
	space string
	err   error
}

func TestMain(m *testing.M) {
	code := func() int {
		if os.Geteuid() != 0 {
			fmt.Println("e2e: skipping: the all-in-one server starts the root node-manager; run as root (CI does)")
			return 0
		}
		dir, err := os.MkdirTemp("", "space-e2e-bin-")
		if err != nil {
			bin.err = err
			return m.Run()
		}
		defer os.RemoveAll(dir)
		bin.dir, bin.space = dir, filepath.Join(dir, "space")
		bin.err = build(dir)
		return m.Run()
	}()
	os.Exit(code)
}

func build(dir string) error {
	root, err := filepath.Abs("..")
	if err != nil {
		return err
	}
	steps := [][]string{
		{"go", "build", "-o", filepath.Join(dir, "space"), "./cmd/space"},
		{"go", "build", "-o", filepath.Join(dir, "space-node-manager"), "./cmd/space-node-manager"},
		{"go", "build", "-o", filepath.Join(dir, "space-host-bridge"), "./cmd/space-host-bridge"},
		{"go", "build", "-tags", "osusergo,netgo", "-o", filepath.Join(dir, "space-guest"), "./cmd/space-guest"},
	}
	for _, s := range steps {
		cmd := exec.Command(s[0], s[1:]...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %v\n%s", s, err, out)
		}
	}
	return nil
}

// instance is one running `space server --dev`.
type instance struct {
	t       testing.TB
	dataDir string
	url     string
	key     string
	cmd     *exec.Cmd
	exited  chan struct{}
	logMu   sync.Mutex
	log     bytes.Buffer
}

// startServer starts `space server --dev` on dataDir and waits until it is ready.
func startServer(t testing.TB, dataDir string) *instance {
	t.Helper()
	return startServerWith(t, dataDir)
}

// startServerWith starts `space server --dev` with extra flags.
func startServerWith(t testing.TB, dataDir string, extra ...string) *instance {
	t.Helper()
	return startServerEnv(t, dataDir, nil, extra...)
}

// startServerEnv is startServerWith with extra environment variables.
func startServerEnv(t testing.TB, dataDir string, env []string, extra ...string) *instance {
	t.Helper()
	in := launchServer(t, dataDir, env, extra...)
	in.waitTemplate("minimal")
	return in
}

// launchServer starts `space server --dev` and returns as soon as it
// serves, its templates possibly still building.
func launchServer(t testing.TB, dataDir string, env []string, extra ...string) *instance {
	t.Helper()
	return launchServerBinary(t, bin.space, dataDir, env, extra...)
}

// launchServerBinary is launchServer with the space binary at space (whose
// node-manager and guest are the ones beside it).
func launchServerBinary(t testing.TB, space, dataDir string, env []string, extra ...string) *instance {
	t.Helper()
	if bin.err != nil {
		t.Fatalf("build: %v", bin.err)
	}
	in := &instance{t: t, dataDir: dataDir, exited: make(chan struct{})}
	// A test never starts a kernel build (minutes): its node moves to the
	// minimal kernel if `make test` is building it (--kernel-build wait).
	args := append([]string{"server", "--dev", "--listen", "127.0.0.1:0", "--data-dir", dataDir, "--kernel-build", "wait"}, extra...)
	if os.Getenv("SPACE_BENCH_TEMPLATE") != "base" {
		// The Debian template takes minutes to build; tests use minimal.
		args = append(args, "--no-base-template")
	}
	cmd := exec.Command(space, args...)
	cmd.Env = append(append(os.Environ(), "SPACE_DATA_DIR="+dataDir), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &lockedWriter{in: in}
	// The server's children (its node-manager) write to the same pipes:
	// one that outlives a killed server must not keep Wait, and the test,
	// from seeing the server gone.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start server: %v", err)
	}
	in.cmd = cmd
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	go func() { _ = cmd.Wait(); close(in.exited) }()
	deadline := time.After(2 * time.Minute)
	for in.url == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("server exited before it was ready:\n%s", in.logs())
			}
			if v, ok := strings.CutPrefix(l, "SPACE_API_URL="); ok {
				in.url = v
			}
		case <-deadline:
			in.kill()
			t.Fatalf("server not ready after 2m:\n%s", in.logs())
		}
	}
	key, err := os.ReadFile(filepath.Join(dataDir, "admin.key"))
	if err != nil {
		t.Fatalf("admin key: %v", err)
	}
	in.key = strings.TrimSpace(string(key))
	// Whatever a test leaves (a failure midway), delete it through the API
	// before the leftover check, so one failure does not leak into the next.
	t.Cleanup(func() {
		select {
		case <-in.exited:
			return
		default:
		}
		var list struct{ Sandboxes []sandbox }
		in.do("GET", "/v1/sandboxes", nil, &list)
		for _, sb := range list.Sandboxes {
			in.do("DELETE", "/v1/sandboxes/"+sb.ID, nil, nil)
		}
		in.stop()
	})
	return in
}

type lockedWriter struct{ in *instance }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.in.logMu.Lock()
	defer w.in.logMu.Unlock()
	if w.in.log.Len() < 8<<20 {
		w.in.log.Write(p)
	}
	return len(p), nil
}

func (in *instance) logs() string {
	in.logMu.Lock()
	defer in.logMu.Unlock()
	s := in.log.String()
	if len(s) > 20000 {
		s = "…" + s[len(s)-20000:]
	}
	return s
}

// stop stops the server with SIGTERM, as an operator would.
func (in *instance) stop() {
	select {
	case <-in.exited:
		return
	default:
	}
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-in.exited:
	case <-time.After(30 * time.Second):
		in.t.Errorf("server did not stop within 30s of SIGTERM:\n%s", in.logs())
		in.kill()
	}
}

// kill kills the server outright, like a crash.
func (in *instance) kill() {
	select {
	case <-in.exited:
		return
	default:
	}
	_ = in.cmd.Process.Kill()
	<-in.exited
}

func (in *instance) waitTemplate(name string) {
	in.t.Helper()
	deadline := time.Now().Add(20 * time.Minute)
	for time.Now().Before(deadline) {
		var list struct {
			Templates []struct{ Name, State, Reason string } `json:"templates"`
		}
		if in.do("GET", "/v1/templates", nil, &list) == http.StatusOK {
			for _, tp := range list.Templates {
				if tp.Name == name && tp.State == "ready" {
					return
				}
				if tp.Name == name && tp.State == "failed" {
					in.t.Fatalf("template %s failed: %s\n%s", name, tp.Reason, in.logs())
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	in.t.Fatalf("template %s not ready after 2m:\n%s", name, in.logs())
}

// do sends a JSON request with the admin key and decodes the answer into out.
func (in *instance) do(method, path string, body, out any) int {
	return in.doKey(in.key, method, path, body, out)
}

func (in *instance) doKey(key, method, path string, body, out any) int {
	in.t.Helper()
	return in.doHeader(key, "", method, path, body, out)
}

// doIdem is do with an Idempotency-Key.
func (in *instance) doIdem(idem, method, path string, body, out any) int {
	in.t.Helper()
	return in.doHeader(in.key, idem, method, path, body, out)
}

func (in *instance) doHeader(key, idem, method, path string, body, out any) int {
	in.t.Helper()
	var r io.Reader
	if body != nil {
		if b, ok := body.([]byte); ok {
			r = bytes.NewReader(b)
		} else {
			b, _ := json.Marshal(body)
			r = bytes.NewReader(b)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, in.url+path, r)
	req.Header.Set("Authorization", "Bearer "+key)
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		in.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			in.t.Fatalf("%s %s: HTTP %d: decode %q: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

// cli runs the space CLI against the instance and returns stdout, stderr and
// the exit code.
func (in *instance) cli(stdin string, args ...string) (string, string, int) {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.space, args...)
	cmd.Env = append(os.Environ(), "SPACE_API_URL="+in.url, "SPACE_API_KEY="+in.key)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		in.t.Fatalf("space %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// sandbox is the part of the API's sandbox the tests read.
type sandbox struct {
	ID         string `json:"id"`
	Tenant     string `json:"tenant"`
	State      string `json:"state"`
	Reason     string `json:"reason"`
	Template   string `json:"template"`
	Runtime    string `json:"runtime"`
	Generation uint64 `json:"generation"`
	Node       string `json:"node"`
}

type execResult struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

func (in *instance) create(template string) sandbox {
	in.t.Helper()
	return in.createWith(template, "ns")
}

func (in *instance) createWith(template, runtime string) sandbox {
	in.t.Helper()
	var sb struct {
		sandbox
		Message string `json:"message"`
	}
	// A node offers vm once its guest kernel is fetched; until then a vm
	// create is refused with 503, so wait for it.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		code := in.do("POST", "/v1/sandboxes", map[string]any{"template": template, "runtime": runtime, "memory_mib": 256}, &sb)
		if code == http.StatusCreated {
			return sb.sandbox
		}
		if code != http.StatusServiceUnavailable || runtime != "vm" || time.Now().After(deadline) {
			in.t.Fatalf("create: HTTP %d %s\n%s", code, sb.Message, in.logs())
		}
		time.Sleep(time.Second)
	}
}

func (in *instance) exec(id string, cmd ...string) execResult {
	in.t.Helper()
	var res execResult
	if code := in.do("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"cmd": cmd}, &res); code != http.StatusOK {
		in.t.Fatalf("exec %v: HTTP %d %+v", cmd, code, res)
	}
	return res
}

func (in *instance) delete(id string) {
	in.t.Helper()
	if code := in.do("DELETE", "/v1/sandboxes/"+id, nil, nil); code != http.StatusNoContent {
		in.t.Fatalf("delete %s: HTTP %d", id, code)
	}
}
