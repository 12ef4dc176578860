package vm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
)

// TestRemovedCwd runs a process in an execution directory and checks when
// it counts as one whose directory was removed: not while the directory is
// there or only renamed, yes once it is removed, and never for a directory
// outside the driver's exec root. Such a process (here sleep, not QEMU and
// not of the driver's uids) is still not taken for a VM.
func TestRemovedCwd(t *testing.T) {
	root := filepath.Join(t.TempDir(), "exec")
	dir := filepath.Join(root, "exec-1")
	other := filepath.Join(t.TempDir(), "exec-2")
	for _, d := range []string{dir, other} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	run := func(dir string) *exec.Cmd {
		cmd := exec.Command("sleep", "600")
		cmd.Dir = dir
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	in, out := run(dir), run(other)
	proc := func(c *exec.Cmd) string { return "/proc/" + strconv.Itoa(c.Process.Pid) }
	roots := []string{root}

	if id, ok := removedCwd(proc(in), roots); ok {
		t.Errorf("removedCwd of a process in a present directory = %q, true", id)
	}
	renamed := filepath.Join(root, "exec-renamed")
	if err := os.Rename(dir, renamed); err != nil {
		t.Fatal(err)
	}
	if id, ok := removedCwd(proc(in), roots); ok {
		t.Errorf("removedCwd after a rename = %q, true; a rename is not a removal", id)
	}
	for _, d := range []string{renamed, other} {
		if err := os.Remove(d); err != nil {
			t.Fatal(err)
		}
	}
	if id, ok := removedCwd(proc(in), roots); !ok || id != "exec-renamed" {
		t.Errorf("removedCwd after the removal = %q, %v; want exec-renamed, true", id, ok)
	}
	if id, ok := removedCwd(proc(out), roots); ok {
		t.Errorf("removedCwd of a directory outside the exec root = %q, true", id)
	}
	if _, ok := removedProcess(in.Process.Pid, roots, defaultUIDBase, defaultUIDs); ok {
		t.Error("a sleep in a removed execution directory was taken for a VM")
	}
}

// TestIgnored parses batches of inotify records.
func TestIgnored(t *testing.T) {
	rec := func(mask uint32, name string) []byte {
		b := make([]byte, unix.SizeofInotifyEvent+len(name))
		binary.NativeEndian.PutUint32(b[4:8], mask)
		binary.NativeEndian.PutUint32(b[12:16], uint32(len(name)))
		copy(b[unix.SizeofInotifyEvent:], name)
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"delete", rec(unix.IN_DELETE|unix.IN_ISDIR, "exec-1\x00\x00"), false},
		{"delete then ignored", slices.Concat(rec(unix.IN_DELETE_SELF, ""), rec(unix.IN_IGNORED, "")), true},
		{"truncated", rec(unix.IN_IGNORED, "")[:8], false},
		{"name longer than the batch", rec(unix.IN_DELETE, "abcdefgh")[:unix.SizeofInotifyEvent+2], false},
	} {
		if got := ignored(tc.b); got != tc.want {
			t.Errorf("%s: ignored = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestStopRemoved starts two confined VMs and removes their directories:
// one while nothing watches (a node-manager that is down), found by a
// driver started afterwards (a restarted node-manager); the other's, the
// whole state directory, while the watcher runs with a period too long to
// matter, so inotify alone must bring it down. A renamed directory is left
// alone. Both QEMUs are gone, their uids released, and the removed state
// directory is not re-created.
func TestStopRemoved(t *testing.T) {
	f := newFixture(t)
	stateDir := filepath.Join(t.TempDir(), "vm")
	const base = 930_000_000
	newDriver := func() *Driver {
		d, err := New(Config{StateDir: stateDir, Kernel: f.kernel, CacheDir: f.cacheDir, Log: testLogger(t), ColdBoot: true, UIDBase: base, UIDs: 8})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return d
	}
	d := newDriver()
	// Last: every VM is killed before the wait for their goroutines.
	t.Cleanup(d.Wait)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := func(id string) *state {
		inst, err := d.Start(ctx, driver.Spec{ExecID: id, SandboxID: "sbx-" + id, RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: 128, CPUs: 1})
		if err != nil {
			t.Fatalf("Start %s: %v", id, err)
		}
		inst.Channel.Close()
		t.Cleanup(func() {
			killProc(inst.Pid, inst.StartTime)
			d.Cleanup(context.Background(), id)
		})
		st, err := d.loadState(id)
		if err != nil {
			t.Fatal(err)
		}
		waitExec(t, d, st)
		return st
	}
	stA, stB := start("removed-a"), start("removed-b")

	// B's directory goes while nothing watches.
	if err := os.RemoveAll(d.execDir(stB.ExecID)); err != nil {
		t.Fatal(err)
	}
	if !driver.ProcAlive(stB.Pid, stB.StartTime) {
		t.Fatal("QEMU of B exited by itself when its directory was removed; the test shows nothing")
	}
	d2 := newDriver()
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan error, 1)
	go func() { watchDone <- d2.WatchRemoved(wctx, time.Hour) }()
	defer func() {
		stopWatch()
		if err := <-watchDone; err != nil {
			t.Errorf("WatchRemoved = %v", err)
		}
	}()
	awaitGone(t, stB, "the watcher started after its directory was removed")
	if !driver.ProcAlive(stA.Pid, stA.StartTime) {
		t.Fatal("QEMU of A, whose directory is there, was stopped")
	}

	t.Run("RenameIsNotRemoval", func(t *testing.T) {
		moved := d.execDir("removed-a-moved")
		if err := os.Rename(d.execDir(stA.ExecID), moved); err != nil {
			t.Fatal(err)
		}
		stopped, err := d2.StopRemoved(ctx)
		if rerr := os.Rename(moved, d.execDir(stA.ExecID)); rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil || len(stopped) != 0 || !driver.ProcAlive(stA.Pid, stA.StartTime) {
			t.Errorf("StopRemoved after a rename stopped %v (%v); QEMU of A alive: %v", stopped, err, driver.ProcAlive(stA.Pid, stA.StartTime))
		}
	})

	// Then the whole state directory goes while the watcher runs.
	if err := os.RemoveAll(stateDir); err != nil {
		t.Fatal(err)
	}
	awaitGone(t, stA, "its state directory was removed under the running watcher")
	d.Wait()
	if held, err := procIDs(base, 8); err != nil || len(held) != 0 {
		t.Errorf("uids of the range still held after both VMs were stopped: %v, %v", held, err)
	}
	if _, err := os.Lstat(stateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the removed state directory is back: %v", err)
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err != nil || bytes.Contains(mi, []byte(stateDir)) {
		t.Errorf("mounts under %s left in the host's namespace (%v)", stateDir, err)
	}

	t.Run("Unconfined", func(t *testing.T) {
		// An unconfined QEMU runs as root: it is known by its executable.
		du, err := New(Config{StateDir: filepath.Join(t.TempDir(), "vm"), Kernel: f.kernel, CacheDir: f.cacheDir, Log: testLogger(t), ColdBoot: true, Unconfined: true})
		if err != nil {
			t.Fatal(err)
		}
		const id = "removed-unconfined"
		inst, err := du.Start(ctx, driver.Spec{ExecID: id, SandboxID: "sbx-u", RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: 128, CPUs: 1})
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		inst.Channel.Close()
		defer du.Wait()
		defer killProc(inst.Pid, inst.StartTime)
		if err := os.RemoveAll(du.execDir(id)); err != nil {
			t.Fatal(err)
		}
		stopped, err := du.StopRemoved(ctx)
		if err != nil || !slices.Equal(stopped, []string{id}) || driver.ProcAlive(inst.Pid, inst.StartTime) {
			t.Errorf("StopRemoved = %v, %v; QEMU alive %v; want %s stopped", stopped, err, driver.ProcAlive(inst.Pid, inst.StartTime), id)
		}
	})
}

// TestStopRemovedReleasesUID: once the QEMU of a removed directory is gone
// its uid claim goes too, while the claim of an execution whose directory
// is there stays.
func TestStopRemovedReleasesUID(t *testing.T) {
	stateDir := t.TempDir()
	d := &Driver{cfg: Config{StateDir: stateDir, UIDBase: 940_000_000, UIDs: 4}}
	if err := os.MkdirAll(d.execDir("kept"), 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(stateDir, uidClaimsDir)
	unlock, err := lockDir(dir) // the first claim makes the lock file
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	for uid, owner := range map[uint32]string{940_000_000: "kept", 940_000_001: "removed"} {
		if err := os.WriteFile(claimPath(dir, uid), []byte(owner), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.releaseStaleClaims(); err != nil {
		t.Fatal(err)
	}
	claims, err := readUIDClaims(dir, 940_000_000, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 1 || claims[940_000_000] != "kept" {
		t.Errorf("claims after release = %v; want only the kept execution's", claims)
	}
	// While the state directory is being removed: the lock file went
	// first; nothing is created.
	if err := os.Remove(filepath.Join(dir, ".lock")); err != nil {
		t.Fatal(err)
	}
	if err := d.releaseStaleClaims(); err != nil {
		t.Errorf("release without the lock file: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".lock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("releasing claims re-created the lock file of a directory being removed: %v", err)
	}
	gone := filepath.Join(t.TempDir(), "gone")
	d2 := &Driver{cfg: Config{StateDir: gone}}
	if err := d2.releaseStaleClaims(); err != nil {
		t.Errorf("release without a state directory: %v", err)
	}
	if _, err := os.Lstat(gone); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("releasing claims re-created the removed state directory: %v", err)
	}
}

// awaitGone waits until st's QEMU is gone, failing after a minute.
func awaitGone(t *testing.T, st *state, why string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for driver.ProcAlive(st.Pid, st.StartTime) {
		if time.Now().After(deadline) {
			t.Fatalf("QEMU of %s (pid %d) still runs a minute after %s", st.ExecID, st.Pid, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
