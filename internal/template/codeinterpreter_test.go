package template

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestCodeInterpreterTemplate builds the code-interpreter template through
// the cache of $SPACE_TEST_CACHE_DIR (the first build per cache runs
// debootstrap, minutes; later ones copy the cached tree) and checks what
// the template holds: the Jupyter stack importable by its Python, the
// server and its autostart entry, and a second build served from the cache.
func TestCodeInterpreterTemplate(t *testing.T) {
	cache := os.Getenv("SPACE_TEST_CACHE_DIR")
	switch {
	case cache == "":
		t.Skip("SPACE_TEST_CACHE_DIR is not set (make test sets it): the first build runs debootstrap")
	case os.Geteuid() != 0:
		t.Skip("debootstrap needs root")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Fatal("debootstrap is not installed (scripts/deps.sh test installs it)")
	}
	dest := filepath.Join(t.TempDir(), "ci")
	if err := CodeInterpreter(t.Context(), dest, cache, nil); err != nil {
		t.Fatal(err)
	}
	checkFinished(t, dest)
	out, err := exec.Command("chroot", dest, "/usr/bin/python3", "-c",
		"import jupyter_client, ipykernel, numpy, pandas, matplotlib, matplotlib_inline; print('ok')").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("the template's python3 lacks the Jupyter stack: %v\n%s", err, out)
	}
	server, err := os.ReadFile(filepath.Join(dest, codeInterpreterServerPath))
	if err != nil || !bytes.Equal(server, codeInterpreterServer) {
		t.Fatalf("server in the template: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dest, codeInterpreterStartPath))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("autostart entry: %v %v", fi, err)
	}
	if out, err := exec.Command("chroot", dest, "/usr/bin/python3", "-m", "py_compile", "/"+codeInterpreterServerPath).CombinedOutput(); err != nil {
		t.Fatalf("the server does not compile with the template's python3: %v\n%s", err, out)
	}

	var progress bytes.Buffer
	again := filepath.Join(t.TempDir(), "ci2")
	if err := CodeInterpreter(t.Context(), again, cache, &progress); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress.String(), "using the cached Debian tree") {
		t.Errorf("second build did not use the cache:\n%s", progress.String())
	}
}

// TestCodeInterpreterServerUnit runs the server's own unit tests
// (codeinterpreter/server_test.py: request parsing, result formats, Bash
// contexts) with the host's python3; they need only its standard library.
func TestCodeInterpreterServerUnit(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	dir := t.TempDir()
	for _, name := range []string{"server.py", "server_test.py"} {
		data, err := os.ReadFile(filepath.Join("codeinterpreter", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(t.Context(), py, "-B", "-m", "unittest", "-v", "server_test")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest server_test: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestCachedTreeOnce: builders of one recipe racing build it once; the
// others copy from the first's tree, and a failed build leaves nothing that
// a later one would take for finished.
func TestCachedTreeOnce(t *testing.T) {
	cache := t.TempDir()
	var builds atomic.Int32
	build := func(ctx context.Context, dest string, _ io.Writer) error {
		builds.Add(1)
		time.Sleep(300 * time.Millisecond) // long enough for the others to arrive
		if err := os.MkdirAll(filepath.Join(dest, "etc"), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dest, "etc", "built"), []byte("yes"), 0o644)
	}
	var wg sync.WaitGroup
	roots := make([]string, 4)
	errs := make([]error, 4)
	for i := range roots {
		wg.Go(func() { roots[i], errs[i] = cachedTree(t.Context(), cache, "recipe A", build, nil) })
	}
	wg.Wait()
	for i := range roots {
		if errs[i] != nil || roots[i] != roots[0] {
			t.Fatalf("builder %d: %q, %v (builder 0: %q)", i, roots[i], errs[i], roots[0])
		}
	}
	if n := builds.Load(); n != 1 {
		t.Errorf("4 racing builders built the tree %d times, want once", n)
	}
	if b, err := os.ReadFile(filepath.Join(roots[0], "etc", "built")); err != nil || string(b) != "yes" {
		t.Errorf("cached tree: %q, %v", b, err)
	}

	fail := func(ctx context.Context, dest string, _ io.Writer) error {
		os.MkdirAll(dest, 0o755)
		return errors.New("mirror unreachable")
	}
	if _, err := cachedTree(t.Context(), cache, "recipe B", fail, nil); err == nil || !strings.Contains(err.Error(), "mirror unreachable") {
		t.Fatalf("failed build: %v", err)
	}
	if _, err := cachedTree(t.Context(), cache, "recipe B", build, nil); err != nil {
		t.Fatalf("build after a failed one: %v", err)
	}
	if n := builds.Load(); n != 2 {
		t.Errorf("after a failed build the next one was not run (%d builds)", n)
	}
}

// TestCodeInterpreterKernel runs codeinterpreter/kernel_test.py, the
// server's Python contexts against a real IPython kernel, in the template's
// cached Debian tree (it has jupyter_client and ipykernel; the host need
// not): an overlay on the tree, so the shared cache is never written, in a
// mount and PID namespace of its own, so every mount and kernel ends with
// the test. Among them the call after an interrupt, which was aborted by
// the kernel (compat/e2b TestCodeInterpreterSDK's flake).
func TestCodeInterpreterKernel(t *testing.T) {
	cache := os.Getenv("SPACE_TEST_CACHE_DIR")
	switch {
	case cache == "":
		t.Skip("SPACE_TEST_CACHE_DIR is not set (make test sets it): the template's Debian tree is built there")
	case os.Geteuid() != 0:
		t.Skip("the overlay mount and chroot need root")
	}
	tree, err := cachedTree(t.Context(), cache, codeInterpreterRecipe(), codeInterpreterTree, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, sub := range []string{"upper/tmp/kernel-test", "work", "merged"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"server.py", "kernel_test.py"} {
		data, err := os.ReadFile(filepath.Join("codeinterpreter", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "upper/tmp/kernel-test", name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := `set -e
m=$1/merged
mount -t overlay overlay -o "lowerdir=$2,upperdir=$1/upper,workdir=$1/work" "$m"
mount -t proc proc "$m/proc"
mount --rbind /dev "$m/dev"
cd "$m/tmp/kernel-test"
exec chroot "$m" /usr/bin/env -i HOME=/tmp PATH=/usr/bin:/bin PYDEVD_DISABLE_FILE_VALIDATION=1 \
	/bin/sh -c 'cd /tmp/kernel-test && exec python3 -B -Xfrozen_modules=off -m unittest -v kernel_test'`
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "--pid", "--fork", "sh", "-c", script, "sh", dir, tree)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kernel_test.py in the code-interpreter tree: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
