package drivertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/template"
	copyvol "github.com/spacesandbox/space/internal/volume/copy"
)

// BuildGuest builds the real guest daemon (cmd/space-guest) statically into
// a temporary directory of t and returns its path. It runs the go command of
// the module that holds the calling test.
func BuildGuest(t testing.TB) string {
	t.Helper()
	root := moduleRoot(t)
	out := filepath.Join(t.TempDir(), "space-guest")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "osusergo,netgo", "-o", out, "./cmd/space-guest")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build space-guest in %s: %v\n%s", root, err, b)
	}
	// The sandbox's users must be able to run it (it is bind-mounted).
	if err := os.Chmod(out, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot(t testing.TB) string {
	t.Helper()
	b, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(b))
	if err != nil || gomod == "" || gomod == os.DevNull {
		t.Fatalf("find the module root with go env GOMOD: %q, %v", gomod, err)
	}
	return filepath.Dir(gomod)
}

// MinimalRootFS builds the minimal template once (template.Minimal, as the
// node does) into a copy-volume store in a temporary directory of t, and
// returns a Harness.RootFS that hands out a writable copy per execution,
// deleted when that execution's test ends. It needs root and busybox-static
// (which template.Minimal installs when missing).
func MinimalRootFS(t testing.TB) func(t *testing.T, execID string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	vols, err := copyvol.New(filepath.Join(t.TempDir(), "volumes"))
	if err != nil {
		t.Fatalf("volume store: %v", err)
	}
	dir, err := vols.CreateTemplate(ctx, "minimal")
	if err != nil {
		t.Fatalf("create template: %v", err)
	}
	if err := template.Minimal(ctx, dir); err != nil {
		t.Fatalf("build the minimal template: %v", err)
	}
	if err := vols.SealTemplate(ctx, "minimal"); err != nil {
		t.Fatalf("seal template: %v", err)
	}
	return func(t *testing.T, execID string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p, err := vols.Clone(ctx, "minimal", execID)
		if err != nil {
			t.Fatalf("clone the minimal template for %s: %v", execID, err)
		}
		t.Cleanup(func() {
			if err := vols.Delete(context.Background(), execID); err != nil {
				t.Errorf("delete the root filesystem of %s: %v", execID, err)
			}
		})
		return p
	}
}
