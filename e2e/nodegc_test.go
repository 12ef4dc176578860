package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/privop"
)

// TestNodeGC: an ns execution started on the node-manager with no runtime
// record (as a crash between a start and its record would leave) survives
// a restart of the server, which only logs it; `space node gc --dry-run`
// lists it and stops nothing; `space node gc` stops and cleans it, and
// leaves the sandbox the control plane knows alone.
func TestNodeGC(t *testing.T) {
	dataDir := t.TempDir()
	// Unique per run: an ns execution's cgroup is named by its id under the
	// shared parent, so a fixed id would be the same group as a TestNodeGC
	// of another checkout running beside this one (whose gc then kills
	// this orphan).
	orphan := fmt.Sprintf("orphan-e2e-%d-%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	t.Cleanup(func() {
		if left := execLeftovers(dataDir, orphan); len(left) > 0 {
			t.Errorf("left of %s:\n%s", orphan, strings.Join(left, "\n"))
		}
	})
	in := startServer(t, dataDir)
	sb := in.create("minimal")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pm := privop.NewClient(filepath.Join(dataDir, "run", "node-manager.sock"))
	_, ch, link, err := pm.Start(ctx, privop.StartArgs{ExecID: orphan, SandboxID: "orphan", Template: "minimal", Runtime: "ns", Hostname: "orphan", CPUs: 1, MemoryMiB: 128, PidsMax: 64})
	if err != nil {
		t.Fatalf("start an execution with no record: %v", err)
	}
	// The sandbox's init ends when its guest channel closes: held open,
	// the orphan stays alive until gc kills it.
	defer ch.Close()
	link.Close()
	t.Cleanup(func() { _ = pm.Cleanup(context.Background(), orphan, "ns") })

	// A restarted node logs the orphan and leaves it running.
	in.stop()
	in = startServer(t, dataDir)
	// Before the server's stop: the cleanup needs its node-manager.
	t.Cleanup(func() { _ = pm.Cleanup(context.Background(), orphan, "ns") })
	waitLog(t, in, "an execution no runtime record refers to runs on this node", orphan)
	if ok, err := pm.Alive(ctx, orphan); !ok || err != nil {
		t.Fatalf("the orphan after a restart of the node: alive %v, %v; want it left running\n%s", ok, err, in.logs())
	}

	dry := nodeGC(t, dataDir, 0, "--dry-run")
	if !slices.Equal(orphanIDs(dry), []string{orphan}) || dry.Orphans[0].Runtime != "ns" || dry.Orphans[0].Cleaned {
		t.Fatalf("gc --dry-run = %+v; want %s of ns, not cleaned", dry, orphan)
	}
	if ok, err := pm.Alive(ctx, orphan); !ok || err != nil {
		t.Fatalf("the orphan after gc --dry-run: alive %v, %v; want it left running", ok, err)
	}

	done := nodeGC(t, dataDir, 0)
	if !slices.Equal(orphanIDs(done), []string{orphan}) || !done.Orphans[0].Cleaned {
		t.Fatalf("gc = %+v; want %s cleaned", done, orphan)
	}
	if ok, _ := pm.Alive(ctx, orphan); ok {
		t.Error("the orphan still runs after gc")
	}
	held, err := pm.ListExecutions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(held.Executions, func(h privop.HeldExecution) bool { return h.ExecID == orphan }) {
		t.Errorf("the node-manager still holds %s after gc: %+v", orphan, held)
	}
	if again := nodeGC(t, dataDir, 0); len(again.Orphans) != 0 {
		t.Errorf("a second gc found %+v; want nothing", again)
	}

	// A root volume no runtime holds, as a node-manager killed between
	// the clone and the runtime's state leaves it (catalogue F-12).
	leftover := orphan + "-vol"
	vol := leftoverVolume(t, dataDir, leftover)
	dry = nodeGC(t, dataDir, 0, "--dry-run")
	if len(dry.Orphans) != 1 || dry.Orphans[0].ExecID != leftover || !dry.Orphans[0].VolumeOnly || dry.Orphans[0].Cleaned {
		t.Fatalf("gc --dry-run with a leftover volume = %+v; want %s, volume only, not cleaned", dry, leftover)
	}
	if _, err := os.Lstat(vol); err != nil {
		t.Fatalf("the leftover volume after gc --dry-run: %v; want it left", err)
	}
	done = nodeGC(t, dataDir, 0)
	if len(done.Orphans) != 1 || done.Orphans[0].ExecID != leftover || !done.Orphans[0].Cleaned {
		t.Fatalf("gc with a leftover volume = %+v; want %s cleaned", done, leftover)
	}
	if _, err := os.Lstat(vol); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the leftover volume after gc: %v; want it deleted", err)
	}
	if res := in.exec(sb.ID, "echo", "still here"); res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "still here" {
		t.Errorf("the control plane's sandbox after gc: %+v", res)
	}
}

// leftoverVolume makes volume id in the node's volume store as a clone of
// the minimal template, behind the node-manager's back, and returns its
// path; the test's cleanup deletes it if gc did not.
func leftoverVolume(t *testing.T, dataDir, id string) string {
	t.Helper()
	tpls, _ := filepath.Glob(filepath.Join(dataDir, "*", "templates", "minimal"))
	if len(tpls) != 1 {
		t.Fatalf("the minimal template in %s: found %v", dataDir, tpls)
	}
	vol := filepath.Join(filepath.Dir(filepath.Dir(tpls[0])), "volumes", id)
	snap := exec.Command("btrfs", "subvolume", "snapshot", tpls[0], vol)
	if out, err := snap.CombinedOutput(); err != nil {
		// The copy backend: plain directories.
		if out2, err2 := exec.Command("cp", "-a", tpls[0], vol).CombinedOutput(); err2 != nil {
			t.Fatalf("make a leftover volume: btrfs: %v %s; cp: %v %s", err, out, err2, out2)
		}
	}
	t.Cleanup(func() {
		if _, err := os.Lstat(vol); err == nil {
			exec.Command("btrfs", "subvolume", "delete", vol).Run()
			os.RemoveAll(vol)
		}
	})
	return vol
}

// nodeGC runs `space node gc -o json` with args and checks its exit code.
func nodeGC(t *testing.T, dataDir string, wantCode int, args ...string) nodev1.Orphans {
	t.Helper()
	cmd := exec.Command(bin.space, append([]string{"node", "gc", "--data-dir", dataDir, "-o", "json"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("space node gc: %v", err)
	}
	if code != wantCode {
		t.Fatalf("space node gc %v exited %d, want %d: %s%s", args, code, wantCode, out, stderr.String())
	}
	var found nodev1.Orphans
	if err := json.Unmarshal(out, &found); err != nil {
		t.Fatalf("space node gc -o json: %v: %s", err, out)
	}
	return found
}

func orphanIDs(o nodev1.Orphans) []string {
	var ids []string
	for _, e := range o.Orphans {
		ids = append(ids, e.ExecID)
	}
	return ids
}

// waitLog waits until the server's log has a line holding every part.
func waitLog(t *testing.T, in *instance, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		for _, line := range strings.Split(in.logs(), "\n") {
			if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q in two minutes:\n%s", parts, in.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// execLeftovers lists what of one ns execution is left: its cgroups,
// mounts naming it, its driver state and root volume.
func execLeftovers(dataDir, execID string) []string {
	var out []string
	for _, m := range mountsUnder(dataDir) {
		if strings.Contains(m, execID) {
			out = append(out, "mount "+m)
		}
	}
	groups, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "space", execID))
	more, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "space", execID))
	own, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "space."+execID)) // its own cpu group (v1)
	for _, g := range slices.Concat(groups, more, own) {
		out = append(out, "cgroup "+g)
	}
	if _, err := os.Lstat(filepath.Join(dataDir, "ns", "exec", execID)); err == nil {
		out = append(out, "ns state "+execID)
	}
	vols, _ := filepath.Glob(filepath.Join(dataDir, "*", "volumes", execID))
	for _, v := range vols {
		out = append(out, "volume "+v)
	}
	return out
}

// TestVMWithRemovedDirectoryStops: a vm execution's QEMU outlives its
// server, but not its state directory: one removed while the server is
// down is stopped by the next node-manager, one removed while it runs is
// stopped at once.
func TestVMWithRemovedDirectoryStops(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
	}
	dataDir := newDataDir(t)
	in := startServer(t, dataDir)
	x, y := in.createWith("minimal", "vm"), in.createWith("minimal", "vm")
	qemuX, dirX := vmOf(t, dataDir, x.ID)
	qemuY, dirY := vmOf(t, dataDir, y.ID)

	in.stop()
	if err := os.RemoveAll(dirY); err != nil {
		t.Fatal(err)
	}
	if !alive(qemuY) {
		t.Fatal("QEMU ended with its server; the test shows nothing")
	}
	in = startServer(t, dataDir)
	waitGone(t, qemuY, "its directory was removed while the server was down")
	if !alive(qemuX) {
		t.Fatal("the QEMU whose directory is there was stopped")
	}
	if err := os.RemoveAll(dirX); err != nil {
		t.Fatal(err)
	}
	waitGone(t, qemuX, "its directory was removed")
}

// vmOf returns the pid of the QEMU of sandbox id's execution and its state
// directory (QEMU runs in it).
func vmOf(t *testing.T, dataDir, id string) (int, string) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(dataDir, "volumes", "vm", "exec", "*"))
	for _, d := range dirs {
		if pid := pidWithCwd(d); pid != 0 {
			if cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); strings.Contains(string(cmdline), "qemu") && strings.Contains(string(cmdline), id) {
				return pid, d
			}
		}
	}
	t.Fatalf("no QEMU of sandbox %s in %v", id, dirs)
	return 0, ""
}

func waitGone(t *testing.T, pid int, why string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("QEMU %d still runs two minutes after %s", pid, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
