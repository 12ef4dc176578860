package vmimage

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// sharedCacheDir is kept across test runs (under os.TempDir) so only the first
// run downloads the kernel; entries are named by content hash.
func sharedCacheDir(t *testing.T) string {
	// make test points it at the cache the node-manager uses, where it has
	// built the minimal guest kernel once.
	dir := os.Getenv("SPACE_TEST_CACHE_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "space-vm-test-cache")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func requireApt(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"apt-cache", "apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: needs %s (a Debian host) to fetch the guest kernel", tool)
		}
	}
}

func TestPrepare(t *testing.T) {
	requireApt(t)
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Skip("skipping: needs the cpio tool (apt-get install cpio) to list the initramfs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cache := sharedCacheDir(t)
	bin := filepath.Join(t.TempDir(), "guest")
	if err := os.WriteFile(bin, []byte("not really a guest binary\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := Prepare(ctx, cache, bin)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if !strings.HasPrefix(b.Kernel.Package, "linux-image-") || !strings.HasSuffix(b.Kernel.Package, b.Kernel.Release) {
		t.Errorf("kernel package %q, release %q: want linux-image-<release>", b.Kernel.Package, b.Kernel.Release)
	}
	again, err := Prepare(ctx, cache, bin)
	if err != nil || again.Initrd != b.Initrd {
		t.Errorf("second Prepare: %v, %v; want the cached %s", again, err, b.Initrd)
	}
	out, err := exec.Command("cpio", "-t", "--quiet", "-F", b.Initrd).Output()
	if err != nil {
		t.Fatalf("cpio -t %s: %v", b.Initrd, err)
	}
	names := strings.Fields(string(out))
	for _, want := range []string{"init", "dev/console", "newroot", "lib/modules/order", "lib/modules/virtio_console.ko", "lib/modules/virtio_blk.ko", "lib/modules/qemu_fw_cfg.ko", "lib/modules/virtio_net.ko"} {
		if !slices.Contains(names, want) {
			t.Errorf("initramfs lacks %s; has %v", want, names)
		}
	}
	cmd := exec.Command("cpio", "-i", "--quiet", "--to-stdout", "lib/modules/order", "init")
	cmd.Stdin, _ = os.Open(b.Initrd)
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio extract: %v", err)
	}
	order := strings.Fields(string(got))
	pos := func(n string) int { return slices.Index(order, n) }
	for _, dep := range [][2]string{{"virtio_ring.ko", "virtio_pci.ko"}, {"virtio.ko", "virtio_console.ko"}, {"virtio_pci_modern_dev.ko", "virtio_pci.ko"}, {"failover.ko", "net_failover.ko"}, {"net_failover.ko", "virtio_net.ko"}} {
		if pos(dep[0]) < 0 || pos(dep[1]) < 0 || pos(dep[0]) > pos(dep[1]) {
			t.Errorf("module order %v: %s must come before %s", order, dep[0], dep[1])
		}
	}
	if !bytes.Contains(got, []byte("not really a guest binary")) {
		t.Errorf("/init is not the guest binary")
	}
}

func TestRootImage(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: needs %s (apt-get install e2fsprogs)", tool)
		}
	}
	ctx := context.Background()
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "etc"), 0o755)
	os.WriteFile(filepath.Join(tree, "etc", "hello"), []byte("hello from the template\n"), 0o644)
	img := filepath.Join(dir, "root.img")
	if err := (RootImage{Dir: tree, Dest: img, HeadroomBytes: 64 << 20}).Build(ctx); err != nil {
		t.Fatalf("Build: %v", err)
	}
	if err := (RootImage{Dir: tree, Dest: img}).Build(ctx); err == nil {
		t.Error("Build over an existing image = nil, want an error")
	}
	clone := filepath.Join(dir, "clone.img")
	if err := CloneImage(ctx, img, clone); err != nil {
		t.Fatalf("CloneImage: %v", err)
	}
	for _, p := range []string{img, clone} {
		out, err := exec.Command("debugfs", "-R", "cat /etc/hello", p).Output()
		if err != nil || string(out) != "hello from the template\n" {
			t.Errorf("debugfs cat /etc/hello in %s = %q, %v", p, out, err)
		}
	}
	fi, err := os.Stat(clone)
	if err != nil || fi.Size() < 64<<20 {
		t.Errorf("clone size %v, %v; want at least the headroom", fi, err)
	}
}
