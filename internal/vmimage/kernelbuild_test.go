package vmimage

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// TestMinimalKernel checks the built minimal kernel in the shared test
// cache: its configuration holds every option of the fragment, the image is
// a bzImage, a second BuildMinimalKernel reuses it, and its initramfs carries
// no modules. The test never builds the kernel (10 to 25 minutes here): it
// waits for a build under way, and skips, saying how to build it, when the
// cache has none and nobody builds it.
func TestMinimalKernel(t *testing.T) {
	requireApt(t)
	cache := sharedCacheDir(t)
	// A build under way (`make test` starts one in the background) is
	// waited for, until five minutes before the test deadline; the checks
	// that follow get a minute of their own.
	wctx, wcancel := context.WithCancel(context.Background())
	if dl, ok := t.Deadline(); ok {
		wctx, wcancel = context.WithDeadline(context.Background(), dl.Add(-5*time.Minute))
	}
	defer wcancel()
	k, err := AwaitMinimalKernel(wctx, cache)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if errors.Is(err, errdefs.ErrNotFound) {
		t.Skipf("skipping: %v; build it once with: go run ./internal/vmimage/buildkernel -cache-dir %s", err, cache)
	}
	if err != nil {
		t.Fatalf("CachedMinimalKernel: %v", err)
	}
	if !k.Minimal || k.ModulesDir != "" || k.Package != KernelSourcePackage || !strings.HasSuffix(k.Release, "-space") {
		t.Errorf("kernel %+v: want a minimal kernel without modules, release ending -space", k)
	}
	again, err := BuildMinimalKernel(ctx, cache, nil)
	if err != nil || *again != *k {
		t.Errorf("BuildMinimalKernel with the kernel cached = %+v, %v; want %+v at once", again, err, k)
	}

	got, err := MinimalKernelConfig(k)
	if err != nil {
		t.Fatalf("MinimalKernelConfig: %v", err)
	}
	want, err := ParseKernelConfig(GuestKernelConfig)
	if err != nil {
		t.Fatal(err)
	}
	if miss := want.Missing(got); len(miss) > 0 {
		t.Errorf("the built kernel lacks options of the fragment: %q", miss)
	}
	for _, off := range []string{"CONFIG_MODULES", "CONFIG_PCI", "CONFIG_ACPI"} {
		if got[off] == "y" {
			t.Errorf("the minimal kernel has %s=y", off)
		}
	}
	if _, err := MinimalKernelConfig(&Kernel{Vmlinuz: k.Vmlinuz}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("MinimalKernelConfig of a package kernel = %v, want InvalidArgument", err)
	}

	checkBzImage(t, k.Vmlinuz)
	checkNoModules(t, k, cache)
}

// checkBzImage reads the x86 boot protocol header: "HdrS" at 0x202.
func checkBzImage(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hdr := make([]byte, 0x210)
	if _, err := io.ReadFull(f, hdr); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if string(hdr[0x202:0x206]) != "HdrS" || binary.LittleEndian.Uint16(hdr[0x206:]) < 0x20c {
		t.Errorf("%s is not a bzImage of boot protocol 2.12 or later", path)
	}
}

// checkNoModules builds the initramfs for k and checks it holds no module
// and an empty module order.
func checkNoModules(t *testing.T, k *Kernel, cache string) {
	t.Helper()
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Skip("skipping the initramfs check: needs cpio")
	}
	bin := filepath.Join(t.TempDir(), "guest")
	if err := os.WriteFile(bin, []byte("not really a guest binary\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	initrd, err := BuildInitramfs(k, bin, cache)
	if err != nil {
		t.Fatalf("BuildInitramfs: %v", err)
	}
	defer os.Remove(initrd)
	out, err := exec.Command("cpio", "-t", "--quiet", "-F", initrd).Output()
	if err != nil {
		t.Fatalf("cpio -t: %v", err)
	}
	names := strings.Fields(string(out))
	if !slices.Contains(names, "init") || !slices.Contains(names, "lib/modules/order") {
		t.Errorf("initramfs %v lacks init or the module order", names)
	}
	for _, n := range names {
		if strings.HasSuffix(n, ".ko") {
			t.Errorf("the minimal kernel's initramfs holds module %s", n)
		}
	}
}

func TestLockFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".lock")
	unlock, err := lockFile(context.Background(), path)
	if err != nil {
		t.Fatalf("lockFile: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if _, err := lockFile(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a second lock while held = %v, want it to wait until ctx ends", err)
	}
	unlock()
	unlock2, err := lockFile(context.Background(), path)
	if err != nil {
		t.Fatalf("lockFile after unlock: %v", err)
	}
	unlock2()
}
