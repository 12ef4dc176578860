package e2e

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/vmimage"
)

// TestVMKernelSwitch: a node whose cache has no minimal kernel serves vm at
// once on Debian's cloud kernel (q35) while a build is under way, says so in
// GET /v1/nodes, and moves new VMs to the minimal kernel (microvm) when the
// build lands; the VM started before keeps running on its kernel.
//
// The "build" is the test's: it holds the cache's build lock as a build
// does, then puts the kernel `make test` built (the shared cache's) in place
// and lets go, so the node sees exactly what a finished build leaves.
func TestVMKernelSwitch(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
	}
	shared := os.Getenv("SPACE_TEST_CACHE_DIR")
	if shared == "" {
		t.Skip("SPACE_TEST_CACHE_DIR is not set (make test sets it)")
	}
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	built, err := vmimage.AwaitMinimalKernel(wctx, shared)
	if errors.Is(err, errdefs.ErrNotFound) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}

	cache := t.TempDir()
	parent := filepath.Join(cache, "minimal-kernel")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(parent, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	in := startServerEnv(t, t.TempDir(), []string{"SPACE_CACHE_DIR=" + cache})
	var ids []string
	defer func() {
		if t.Failed() {
			for _, id := range ids {
				in.do(http.MethodDelete, "/v1/sandboxes/"+id, nil, nil)
			}
		}
	}()
	before := in.createWith("minimal", "vm")
	ids = append(ids, before.ID)
	if out := in.exec(before.ID, "cat", "/proc/cmdline").Stdout; strings.Contains(out, "virtio_mmio.device=") {
		t.Fatalf("a VM created before the minimal kernel exists runs microvm: %q", out)
	}
	beforeKernel := strings.TrimSpace(in.exec(before.ID, "uname", "-r").Stdout)
	if status := vmStatus(t, in); !strings.HasPrefix(status, "q35 (Debian's cloud kernel") || !strings.Contains(status, "waiting for a build") {
		t.Errorf("vm status while the build runs: %q; want q35 on the cloud kernel, waiting for the build", status)
	}

	// The build lands.
	dest := filepath.Join(parent, filepath.Base(filepath.Dir(built.Vmlinuz)))
	if err := os.Mkdir(dest, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"bzImage", "release", "config"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(built.Vmlinuz), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dest, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	unix.Flock(int(lock.Fd()), unix.LOCK_UN)

	deadline := time.Now().Add(time.Minute)
	for status := vmStatus(t, in); !strings.HasPrefix(status, "microvm (minimal kernel "+built.Release+")"); status = vmStatus(t, in) {
		if time.Now().After(deadline) {
			t.Fatalf("vm status a minute after the build landed: %q; want microvm on %s\n%s", status, built.Release, in.logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
	after := in.createWith("minimal", "vm")
	ids = append(ids, after.ID)
	out := in.exec(after.ID, "sh", "-c", "uname -r; cat /proc/cmdline").Stdout
	if !strings.HasPrefix(out, built.Release+"\n") || !strings.Contains(out, "virtio_mmio.device=") {
		t.Errorf("a VM created after the build landed: %q; want the minimal kernel %s on microvm", out, built.Release)
	}
	if got := strings.TrimSpace(in.exec(before.ID, "uname", "-r").Stdout); got != beforeKernel {
		t.Errorf("the VM created before now runs %q, want %q", got, beforeKernel)
	}
	in.delete(before.ID)
	in.delete(after.ID)
}

// vmStatus is the local node's vm status line in GET /v1/nodes.
func vmStatus(t *testing.T, in *instance) string {
	t.Helper()
	var list sandboxv1.NodeList
	if code := in.do(http.MethodGet, "/v1/nodes", nil, &list); code != http.StatusOK {
		t.Fatalf("GET /v1/nodes: HTTP %d", code)
	}
	for _, n := range list.Nodes {
		if n.ID == "local" {
			return n.RuntimeStatus["vm"]
		}
	}
	return ""
}
