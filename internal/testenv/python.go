package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CacheDir is the directory tests keep downloads in across runs:
// $SPACE_TEST_CACHE_DIR (make test's cache, beside the guest kernel), else
// the user's cache directory's space/.
func CacheDir() string {
	if d := os.Getenv("SPACE_TEST_CACHE_DIR"); d != "" {
		return d
	}
	root, err := os.UserCacheDir()
	if err != nil {
		root = os.TempDir()
	}
	return filepath.Join(root, "space")
}

// PythonVenv returns the python of a virtual environment with the PyPI
// packages of the requirements file installed (pin every package there:
// `pip freeze` of a working venv), made once per content of that file in
// CacheDir()/python/NAME-DIGEST. It fails the test when python3 or pip
// does not work: scripts/deps.sh test installs python3-venv.
func PythonVenv(t testing.TB, name, requirements string) string {
	t.Helper()
	reqs, err := os.ReadFile(requirements)
	if err != nil {
		t.Fatal(err)
	}
	base, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is not installed: scripts/deps.sh test installs it with python3-venv (make test runs it)")
	}
	sum := sha256.Sum256(reqs)
	root := CacheDir()
	dir := filepath.Join(root, "python", name+"-"+hex.EncodeToString(sum[:8]))
	python := filepath.Join(dir, "bin", "python")
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return python
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	// A venv's scripts name its path, so it is made in place; the marker
	// written last keeps an interrupted install from being taken for a
	// finished one (the next run starts it over).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_ = os.RemoveAll(dir)
	install := func(name string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), "PIP_CACHE_DIR="+filepath.Join(root, "pip-cache"), "PIP_DISABLE_PIP_VERSION_CHECK=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = os.RemoveAll(dir)
			t.Fatalf("%s %s (the packages pinned by %s): %v\n%s", name, strings.Join(args, " "), requirements, err, out)
		}
	}
	install(base, "-m", "venv", dir)
	install(python, "-m", "pip", "install", "-q", "-r", requirements)
	if err := os.WriteFile(filepath.Join(dir, ".complete"), reqs, 0o644); err != nil {
		t.Fatal(err)
	}
	return python
}
