package vm

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/guest"
)

// TestGuestFillsItsDisk: a guest writing until its root filesystem is full
// gets ENOSPC inside; on the host its disk.img keeps its size (a file of
// fixed size: the guest can only write blocks inside it), so the host
// filesystem loses at most that, and the guest still answers.
func TestGuestFillsItsDisk(t *testing.T) {
	f := newFixture(t)
	stateDir := t.TempDir()
	d := f.driver(t, stateDir)
	const execID = "vm-diskfull"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		d.Cleanup(context.Background(), execID)
		d.Wait()
	})
	inst, err := d.Start(ctx, driver.Spec{
		ExecID: execID, SandboxID: "sbx-diskfull", RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: 256, CPUs: 1,
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	conn, err := net.FileConn(inst.Channel)
	inst.Channel.Close()
	if err != nil {
		t.Fatal(err)
	}
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Wait(ctx); err != nil {
		t.Fatalf("guest never answered Ready: %v", err)
	}
	img := filepath.Join(d.execDir(execID), diskFile)
	before, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	// The image's headroom is 256 MiB (newFixture): ask for far more.
	out := shell(t, c, "dd if=/dev/zero of=/fill bs=1M count=2048 2>&1; sync; echo rc=$?")
	if !strings.Contains(out, "No space left") {
		t.Errorf("filling the guest's disk: %q, want ENOSPC", out)
	}
	after, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(img, &st); err != nil {
		t.Fatal(err)
	}
	if after.Size() != before.Size() {
		t.Errorf("disk.img grew from %d to %d bytes while the guest filled it", before.Size(), after.Size())
	}
	if allocated := st.Blocks * 512; allocated > after.Size()+1<<20 {
		t.Errorf("disk.img holds %d bytes on the host, more than its %d bytes", allocated, after.Size())
	}
	t.Logf("disk.img: %d MiB, %d MiB allocated on the host after the guest filled it", after.Size()>>20, st.Blocks*512>>20)
	// The guest is full, not broken: it still runs commands and can free
	// its space.
	if got := strings.TrimSpace(shell(t, c, "rm /fill && echo freed")); got != "freed" {
		t.Errorf("after the fill: %q, want freed", got)
	}
}
