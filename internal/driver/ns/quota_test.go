package ns

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/volume/btrfs"
)

// TestDiskQuotaOnBtrfs: two sandboxes on limited btrfs volumes, as on a
// node. Filling one stops at its limit with EDQUOT inside it; the other
// still writes; and a sandbox cannot step outside its limit by making a
// subvolume (its own quota group) inside its root.
func TestDiskQuotaOnBtrfs(t *testing.T) {
	testenv.RequiresBtrfs(t)
	ctx := context.Background()
	dir := t.TempDir()
	l, err := btrfs.MountLoopback(ctx, filepath.Join(dir, "img"), filepath.Join(dir, "mnt"), 512<<20)
	if err != nil {
		t.Fatalf("MountLoopback: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Unmount(context.Background()); err != nil {
			t.Errorf("Unmount: %v", err)
		}
	})
	vols, err := btrfs.NewWithConfig(filepath.Join(l.Mountpoint, "store"), btrfs.Config{Image: l.Image})
	if err != nil {
		t.Fatal(err)
	}
	if mode, why := vols.QuotaMode(); mode == "" {
		t.Fatalf("no quotas on a fresh btrfs: %s", why)
	}
	tpl, err := vols.CreateTemplate(ctx, "busybox")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", busyboxRoot(t)+"/.", tpl+"/").CombinedOutput(); err != nil {
		t.Fatalf("fill template: %v: %s", err, out)
	}
	if err := vols.SealTemplate(ctx, "busybox"); err != nil {
		t.Fatal(err)
	}
	const limit = 32 << 20
	d := newDriver(t, testConfig(t, t.TempDir()))
	boxes := map[string]*sandbox{}
	for _, id := range []string{"full", "neighbour"} {
		root, err := vols.Clone(ctx, "busybox", id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = vols.Delete(context.Background(), id) })
		if err := vols.Limit(ctx, id, limit); err != nil {
			t.Fatal(err)
		}
		sp := spec(t, id)
		sp.RootFS = root
		inst, err := d.Start(ctx, sp)
		if err != nil {
			t.Fatalf("Start %s: %v", id, err)
		}
		boxes[id] = &sandbox{inst: inst, in: bufio.NewReader(inst.Channel)}
	}
	// Both are cleaned up before waiting for the driver's processes.
	t.Cleanup(func() {
		for id, s := range boxes {
			s.inst.Channel.Close()
			_ = d.Cleanup(context.Background(), id)
		}
		d.Wait()
	})
	full, neighbour := boxes["full"], boxes["neighbour"]

	out, code := full.run(t, "dd if=/dev/zero of=/fill bs=1M count=256 2>&1; sync")
	if !strings.Contains(out, "quota exceeded") && !strings.Contains(out, "No space left") {
		t.Errorf("filling the sandbox past its %d MiB: exit %d, %q; want EDQUOT", limit>>20, code, out)
	}
	if u, err := vols.DiskUsage(ctx, "full"); err != nil || u.UsedBytes > limit {
		t.Errorf("the full sandbox's volume is charged %+v (%v), want at most its limit", u, err)
	}
	neighbour.want(t, "dd if=/dev/zero of=/x bs=1M count=16 2>/dev/null && sync && echo ok", "ok")
	full.want(t, "rm /fill && echo freed", "freed")
	full.want(t, "!subvol", "EPERM")
}
