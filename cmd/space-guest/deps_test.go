package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/guestbin"
)

const module = "github.com/spacesandbox/space/"

// TestDeps keeps the guest daemon small and apart from host code: of this
// module it may import only internal/guestd, internal/guestinit,
// internal/sandboxnet, api/guest, its crash points (internal/failpoint,
// standing on internal/errdefs: the standard library only) and the image
// defaults' format (internal/template/imagecfg, the standard library only).
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(dep, module)
		if !ok || rel == "cmd/space-guest" {
			continue
		}
		if !strings.HasPrefix(rel, "internal/guestd") && rel != "internal/guestinit" && rel != "internal/sandboxnet" && !strings.HasPrefix(rel, "api/guest/") &&
			rel != "internal/failpoint" && rel != "internal/errdefs" && rel != "internal/template/imagecfg" {
			t.Errorf("space-guest imports %s; only internal/guestd..., internal/guestinit, internal/sandboxnet, internal/failpoint, internal/errdefs, internal/template/imagecfg and api/guest/... are allowed", dep)
		}
	}
	for _, banned := range []string{"os/user", "net/http/cgi", "modernc.org/sqlite", "github.com/coder/websocket"} {
		for _, dep := range strings.Fields(string(out)) {
			if dep == banned {
				t.Errorf("space-guest imports %s", banned)
			}
		}
	}
}

var (
	buildOnce sync.Once
	builtPath string
	buildErr  error
)

// buildStatic builds space-guest as the runtimes ship it: CGO_ENABLED=0,
// osusergo and netgo tags.
func buildStatic(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "space-guest-build")
		if err != nil {
			buildErr = err
			return
		}
		builtPath = filepath.Join(dir, "space-guest")
		cmd := exec.Command("go", "build", "-tags", "osusergo,netgo", "-o", builtPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = err
			builtPath = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build space-guest with CGO_ENABLED=0: %v: %s", buildErr, builtPath)
	}
	return builtPath
}

// buildDefault builds space-guest with `go build` and this environment's
// defaults: cgo on where a C compiler is (static_cgo.go).
func buildDefault(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "space-guest")
	cmd := exec.Command("go", "build", "-o", out, ".")
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CGO_ENABLED=") && !strings.HasPrefix(e, "GOFLAGS=") {
			env = append(env, e)
		}
	}
	cmd.Env = env
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build space-guest: %v\n%s", err, b)
	}
	return out
}

// TestDefaultBuildIsStatic: a plain `go build ./cmd/space-guest` yields a
// guest the node-manager accepts and that serves as a sandbox's PID 1.
func TestDefaultBuildIsStatic(t *testing.T) {
	bin := buildDefault(t)
	if err := guestbin.Check(bin); err != nil {
		t.Fatalf("the default build: %v", err)
	}
	c := startBinInNamespace(t, bin)
	if out, end := shell(t, c, "echo served"); strings.TrimSpace(out) != "served" || end.GetExitCode() != 0 {
		t.Errorf("echo in the default build's sandbox: %q, %v; want served, exit 0", out, end)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtPath != "" && buildErr == nil {
		os.RemoveAll(filepath.Dir(builtPath))
	}
	os.Exit(code)
}

func TestStaticBinary(t *testing.T) {
	bin := buildStatic(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("open %s: %v", bin, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter: it is not static", bin)
		}
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Errorf("space-guest --version: %q, %v", out, err)
	}
}
