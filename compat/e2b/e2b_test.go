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

	"github.com/spacesandbox/space/internal/testenv/devserver"
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
	{"ns", []string{"commands.mjs", "files.mjs", "lifecycle.mjs", "errors.mjs", "ports.mjs", "keys.mjs", "surface.mjs"}},
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
	for _, name := range []string{"lib.mjs", "package.json", "commands.mjs", "files.mjs", "lifecycle.mjs", "errors.mjs", "ports.mjs", "keys.mjs", "surface.mjs"} {
		copyFile(t, name, filepath.Join(work, name))
	}
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	bin := devserver.Build(t)
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
	s.runScriptEnv(t, work, name)
}

// runScriptEnv runs one SDK script against srv with more environment
// variables, and returns its output.
func (s *server) runScriptEnv(t testing.TB, work, name string, env ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", name)
	cmd.Dir = work
	key := s.Key
	if name == "keys.mjs" || name == "network.mjs" { // E2B's shape, for the SDK that checks it (2.45)
		key = s.e2bKey
	}
	cmd.Env = append(os.Environ(),
		"E2B_API_URL="+s.E2BAPI, "E2B_SANDBOX_URL="+s.E2BSandbox, "E2B_API_KEY="+key, "SPACE_KEY="+s.Key,
		"E2B_DOMAIN=localhost", "E2B_TEMPLATE=minimal")
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	t.Logf("node %s:\n%s", name, out)
	if err != nil {
		t.Errorf("node %s: %v\nserver log:\n%s", name, err, s.Logs())
	}
	return string(out)
}

// installSDK runs `npm ci` for package-lock.json into the cache, once per
// lockfile content, and returns the node_modules directory.
func installSDK(t testing.TB) string {
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

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// server is a running `space server --dev` (internal/testenv/devserver)
// with the key in E2B's shape the scripts use.
type server struct {
	*devserver.Server
	e2bKey string // `space key create --e2b`
}

// startServer starts the all-in-one server from bin, creating sandboxes on
// runtime (extra: more flags), waits until the minimal template and the
// runtime are ready, and mints an E2B-shaped key. It is stopped when the
// test ends.
func startServer(t testing.TB, bin, runtime string, extra ...string) *server {
	t.Helper()
	srv := &server{Server: devserver.Start(t, bin, runtime, extra...)}
	mint := exec.Command(filepath.Join(bin, "space"), "key", "create", "--e2b")
	mint.Env = append(os.Environ(), "SPACE_API_URL="+srv.URL, "SPACE_API_KEY="+srv.Key)
	out, err := mint.Output()
	if err != nil {
		t.Fatalf("space key create --e2b: %v\n%s", err, out)
	}
	srv.e2bKey = strings.TrimSpace(string(out))
	return srv
}
