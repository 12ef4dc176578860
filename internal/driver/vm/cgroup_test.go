package vm

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

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/cgroup"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/reexec"
	"github.com/spacesandbox/space/internal/testenv"
)

func TestVMMLimits(t *testing.T) {
	dir := t.TempDir()
	kernel, initrd := filepath.Join(dir, "k"), filepath.Join(dir, "i")
	for p, size := range map[string]int{kernel: 3 << 20, initrd: 5 << 20} {
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		accel          string
		mem, cpus      int
		wantMiB, pids  int
		wantTBArgument bool
	}{
		// RAM + 96 MiB + RAM/64 + the boot files (8 MiB) [+ 128 MiB TCG buffer]
		{AccelTCG, 256, 1, 256 + 96 + 4 + 8 + 128, vmmPidsBase + 1, true},
		{AccelKVM, 256, 1, 256 + 96 + 4 + 8, vmmPidsBase + 1, false},
		{AccelKVM, 4096, 4, 4096 + 96 + 64 + 8, vmmPidsBase + 4, false},
	} {
		st := &state{ExecID: "e1", MemoryMiB: tc.mem, CPUs: tc.cpus, Accel: tc.accel, Kernel: kernel, Initrd: initrd}
		l, err := vmmLimits(st)
		if err != nil {
			t.Fatal(err)
		}
		if l.MemoryBytes != int64(tc.wantMiB)<<20 || l.PidsMax != tc.pids || l.CPUs != tc.cpus {
			t.Errorf("%s %d MiB %d CPUs: limits %+v, want %d MiB, %d pids, %d CPUs", tc.accel, tc.mem, tc.cpus, l, tc.wantMiB, tc.pids, tc.cpus)
		}
		joined := strings.Join(qemuArgs(st), " ")
		if got := strings.Contains(joined, "tb-size="+strconv.Itoa(tcgTBSizeMiB)); got != tc.wantTBArgument {
			t.Errorf("%s: QEMU args %q: tb-size given = %v, want %v", tc.accel, joined, got, tc.wantTBArgument)
		}
	}
	if _, err := vmmLimits(&state{MemoryMiB: 256, CPUs: 1, Kernel: filepath.Join(dir, "missing"), Initrd: initrd}); err == nil {
		t.Error("vmmLimits without the kernel file: want an error")
	}
	if a, b := CgroupParent("/var/lib/space/vm"), CgroupParent("/var/lib/space2/vm"); a == b || validCgroupName(a) != nil {
		t.Errorf("cgroupParent: %q and %q for two state directories", a, b)
	}
}

// validCgroupName reports whether the cgroup package takes s as a group
// name.
func validCgroupName(s string) error {
	_, err := (&cgroup.Hierarchy{Mode: cgroup.V2, V2: "/sys/fs/cgroup"}).Group(s, "x")
	return err
}

// TestVMMCgroup boots a confined VM and checks its QEMU's host cgroup: QEMU
// is in it in every hierarchy with the limits written; a guest that fills
// its RAM and keeps QEMU translating fresh code does not push QEMU past the
// memory cap (nor get it killed: the overhead is enough); a VM restored
// from its checkpoint is in a group of its own with the same limits; and a
// driver started later over the same state directory (a node restart)
// finds the groups and Cleanup removes them, parent and all.
func TestVMMCgroup(t *testing.T) {
	f := newFixture(t)
	testVMMCgroup(t, f, f.driver)
}

// TestVMMCgroupMicrovm is TestVMMCgroup on the microvm machine with the
// minimal kernel, what a node runs once it has built that kernel.
func TestVMMCgroupMicrovm(t *testing.T) {
	f := newFixture(t)
	k := f.minimalKernel(t)
	testVMMCgroup(t, f, func(t *testing.T, stateDir string) *Driver { return f.microvmDriver(t, stateDir, k) })
}

func testVMMCgroup(t *testing.T, f *fixture, newDriver func(*testing.T, string) *Driver) {
	stateDir := t.TempDir()
	d := newDriver(t, stateDir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const ramMiB = 256
	ids := []string{"cg-boot", "cg-restored"}
	t.Cleanup(func() {
		for _, id := range ids {
			if err := d.Cleanup(context.Background(), id); err != nil {
				t.Errorf("Cleanup %s: %v", id, err)
			}
		}
		d.Wait()
		if d.hier != nil {
			_ = d.hier.RemoveParent(d.cgroupParent)
		}
	})
	inst, err := d.Start(ctx, driver.Spec{ExecID: ids[0], SandboxID: "sbx-cg", RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: ramMiB, CPUs: 1})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	c := guestClient(t, ctx, inst)
	st, err := d.loadState(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	limits := checkVMMGroup(t, d, st)

	churn := buildGuestProgram(t, "tbchurn")
	uploadFile(t, ctx, c, "/tmp/tbchurn", churn)
	// The guest touches twice its RAM (its kernel kills the hog), then runs
	// fresh code for QEMU to translate: 512 rounds of 256 KiB, which TCG
	// turned into about 450 MiB of host code here, three and a half times
	// the bounded buffer. QEMU then holds all the RAM and a full translation
	// buffer; with QEMU's default buffer (up to 1 GiB) it would hold all
	// that code, past its cap, and be killed there.
	rounds := 4 * tcgTBSizeMiB
	out, code, err := guestRun(c, fmt.Sprintf(`awk '%s' >/dev/null 2>&1; chmod 755 /tmp/tbchurn && /tmp/tbchurn -rounds %d -kib 256`, memHogProgram(2*ramMiB), rounds))
	if err == nil && (code != 0 || !strings.HasPrefix(out, "done")) {
		t.Errorf("the guest's code churn: exit %d, output %q", code, out)
	}
	if err != nil || !driver.ProcAlive(st.Pid, st.StartTime) {
		if driver.ProcAlive(st.Pid, st.StartTime) {
			t.Fatalf("the guest's load: %v", err)
		}
		t.Fatalf("QEMU died under the guest's load (killed at its memory cap of %d MiB? see the kernel's log). qemu.log: %s\ndmesg: %s",
			limits.MemoryBytes>>20, tailFile(filepath.Join(d.execDir(st.ExecID), qemuLog), 1024), dmesgTail())
	}
	t.Logf("QEMU's translation buffer: %s", jitInfo(t, ctx, d, st))
	hwm := statusKiB(t, st.Pid, "VmHWM") << 10
	rss := statusKiB(t, st.Pid, "VmRSS") << 10
	g, err := d.vmmGroup(st.Cgroup, st.ExecID)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := g.Stats()
	if err != nil {
		t.Fatalf("group stats: %v", err)
	}
	t.Logf("%d MiB guest on %s under %s, RAM filled and code churned: QEMU peak RSS %d MiB (%+d MiB over the RAM), RSS now %d MiB; group peak %d MiB (%+d), cap %d MiB",
		ramMiB, st.Machine, st.Accel, hwm>>20, int64(hwm>>20)-ramMiB, rss>>20, gs.MemoryPeakBytes>>20, int64(gs.MemoryPeakBytes>>20)-ramMiB, limits.MemoryBytes>>20)
	if rss < ramMiB<<20*3/4 {
		t.Errorf("QEMU's RSS is %d MiB: the guest did not fill its %d MiB (the test proves nothing)", rss>>20, ramMiB)
	}
	if hwm > uint64(limits.MemoryBytes) {
		t.Errorf("QEMU's peak RSS %d MiB is past its cgroup's memory cap %d MiB", hwm>>20, limits.MemoryBytes>>20)
	}
	if gs.MemoryPeakBytes > uint64(limits.MemoryBytes) || gs.MemoryBytes < rss/2 {
		t.Errorf("group stats %+v with QEMU's RSS %d: want QEMU's memory charged to the group, under the cap", gs, rss)
	}

	t.Run("Restore", func(t *testing.T) {
		cpDir := filepath.Join(t.TempDir(), "cp")
		c.Close()
		cp, err := d.Checkpoint(ctx, ids[0], cpDir)
		if err != nil {
			t.Fatalf("Checkpoint: %v", err)
		}
		rinst, err := d.Restore(ctx, driver.Spec{ExecID: ids[1], SandboxID: "sbx-cg2"}, cp)
		if err != nil {
			t.Fatalf("Restore: %v", err)
		}
		rinst.Channel.Close()
		rinst.Link.Close()
		rst, err := d.loadState(ids[1])
		if err != nil {
			t.Fatal(err)
		}
		if got := checkVMMGroup(t, d, rst); got != limits {
			t.Errorf("restored VM's limits %+v, want the booted one's %+v", got, limits)
		}
	})

	t.Run("RestartedDriverRemovesGroups", func(t *testing.T) {
		d2 := newDriver(t, stateDir)
		var groups []*cgroup.Group
		for _, id := range ids {
			s, err := d2.loadState(id)
			if err != nil {
				t.Fatal(err)
			}
			g, err := d2.vmmGroup(s.Cgroup, id)
			if err != nil {
				t.Fatal(err)
			}
			if !g.Exists() {
				t.Errorf("a new driver does not find the group of %s", id)
			}
			groups = append(groups, g)
			if err := d2.Cleanup(ctx, id); err != nil {
				t.Fatalf("Cleanup %s: %v", id, err)
			}
			if driver.ProcAlive(s.Pid, s.StartTime) {
				t.Errorf("QEMU of %s still runs after Cleanup", id)
			}
		}
		for _, g := range groups {
			if g.Exists() {
				t.Errorf("cgroup %v left after Cleanup", g.Dirs())
			}
		}
		if names, err := d2.hier.Children(d2.cgroupParent); err != nil || len(names) != 0 {
			t.Errorf("groups under %s after Cleanup: %v, %v", d2.cgroupParent, names, err)
		}
		checkNoParent(t, d2)
	})
}

// checkVMMGroup checks that st's QEMU is in its group in every hierarchy and
// that the group has st's limits, and returns them.
func checkVMMGroup(t *testing.T, d *Driver, st *state) cgroup.Limits {
	t.Helper()
	want, err := vmmLimits(st)
	if err != nil {
		t.Fatal(err)
	}
	if st.Cgroup != d.cgroupParent {
		t.Fatalf("state records cgroup parent %q, want %q", st.Cgroup, d.cgroupParent)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(st.Pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	rel := "/" + st.Cgroup + "/" + st.ExecID
	g, err := d.vmmGroup(st.Cgroup, st.ExecID)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := g.Procs()
	if err != nil || len(pids) != 1 || pids[0] != st.Pid {
		t.Errorf("group %s holds %v, %v; want QEMU's pid %d alone", rel, pids, err, st.Pid)
	}
	if d.hier.Mode == cgroup.V2 {
		if !strings.Contains(string(b), "0::"+rel+"\n") {
			t.Errorf("QEMU pid %d is in\n%s\nwant %s", st.Pid, b, rel)
		}
		checkFile(t, d.hier.V2, rel, "memory.max", strconv.FormatInt(want.MemoryBytes, 10))
		checkFile(t, d.hier.V2, rel, "pids.max", strconv.Itoa(want.PidsMax))
		checkFile(t, d.hier.V2, rel, "cpu.max", fmt.Sprintf("%d 100000", want.CPUs*100000))
		if t.Failed() {
			t.FailNow()
		}
		return want
	}
	for _, ctrl := range []string{"memory", "pids", "cpu", "freezer"} {
		if !cgroupLineHas(string(b), ctrl, rel) {
			t.Errorf("QEMU pid %d is not in %s%s:\n%s", st.Pid, ctrl, rel, b)
		}
	}
	mem := strconv.FormatInt(want.MemoryBytes, 10)
	checkFile(t, d.hier.V1["memory"], rel, "memory.limit_in_bytes", mem)
	if _, err := os.Stat(filepath.Join(d.hier.V1["memory"], rel, "memory.memsw.limit_in_bytes")); err == nil {
		checkFile(t, d.hier.V1["memory"], rel, "memory.memsw.limit_in_bytes", mem)
	}
	checkFile(t, d.hier.V1["pids"], rel, "pids.max", strconv.Itoa(want.PidsMax))
	if cpu := d.hier.V1["cpu"]; cpu != "" {
		checkFile(t, cpu, rel, "cpu.cfs_quota_us", strconv.Itoa(want.CPUs*100000))
	}
	if threads := statusKiB(t, st.Pid, "Threads"); threads > uint64(want.PidsMax) {
		t.Errorf("QEMU runs %d threads, past its pids.max %d", threads, want.PidsMax)
	}
	if t.Failed() {
		// What follows needs QEMU in its group with its limits.
		t.FailNow()
	}
	return want
}

// cgroupLineHas reports whether a /proc/<pid>/cgroup file puts the process
// in group rel of the v1 controller ctrl.
func cgroupLineHas(file, ctrl, rel string) bool {
	for _, line := range strings.Split(file, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || f[2] != rel {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == ctrl {
				return true
			}
		}
	}
	return false
}

func checkFile(t *testing.T, mount, rel, name, want string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(mount, rel, name))
	if err != nil {
		t.Errorf("read %s: %v", name, err)
		return
	}
	if got := strings.TrimSpace(string(b)); got != want {
		t.Errorf("%s of %s = %s, want %s", name, rel, got, want)
	}
}

// checkNoParent checks that the driver's parent group is gone from every
// hierarchy.
func checkNoParent(t *testing.T, d *Driver) {
	t.Helper()
	mounts := []string{d.hier.V2}
	if d.hier.Mode == cgroup.V1 {
		mounts = mounts[:0]
		for _, m := range d.hier.V1 {
			mounts = append(mounts, m)
		}
	}
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m, d.cgroupParent)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("parent group %s left in %s: %v", d.cgroupParent, m, err)
		}
	}
}

// TestLeftoverGroups makes VMM groups without executions (a directory
// removed by hand, a crash in Cleanup), one with a process in it (as a VM
// whose directory was renamed has), and checks that List reports them,
// StopRemoved removes the empty one and leaves the one with a task and the
// one whose execution has its directory, and Cleanup kills what is in a
// group and removes it.
func TestLeftoverGroups(t *testing.T) {
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	d, err := New(Config{StateDir: dir, Kernel: fakeKernel(t), QEMU: "/bin/true", Log: testLogger(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx := context.Background()
	t.Cleanup(func() {
		for _, id := range []string{"left-1", "left-2", "live"} {
			_ = d.removeVMMGroups(ctx, id, nil)
		}
	})
	mk := func(id string) *cgroup.Group {
		g, err := d.vmmGroup(d.cgroupParent, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Create(cgroup.Limits{MemoryBytes: 64 << 20, PidsMax: 8}); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		return g
	}
	left1, left2, live := mk("left-1"), mk("left-2"), mk("live")
	if err := os.Mkdir(d.execDir("live"), 0o700); err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()
	t.Cleanup(func() { sleeper.Process.Kill(); <-waited })
	if err := left2.AddProc(sleeper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	ids, err := d.List(ctx)
	if err != nil || strings.Join(ids, " ") != "left-1 left-2 live" {
		t.Errorf("List = %v, %v; want left-1 left-2 live", ids, err)
	}
	stopped, err := d.StopRemoved(ctx)
	if err != nil || strings.Join(stopped, " ") != "left-1" {
		t.Errorf("StopRemoved = %v, %v; want left-1", stopped, err)
	}
	if left1.Exists() || !left2.Exists() || !live.Exists() {
		t.Errorf("after StopRemoved the groups exist: empty leftover %v, leftover with a task %v, live %v; want false, true, true", left1.Exists(), left2.Exists(), live.Exists())
	}
	if err := d.Cleanup(ctx, "left-2"); err != nil {
		t.Fatalf("Cleanup left-2: %v", err)
	}
	select {
	case <-waited:
		waited <- nil
	case <-time.After(30 * time.Second):
		t.Error("the process in the leftover group still runs after Cleanup")
	}
	if left2.Exists() {
		t.Error("Cleanup left the group of an execution without a directory")
	}
	if err := d.Cleanup(ctx, "live"); err != nil {
		t.Fatalf("Cleanup live: %v", err)
	}
	if live.Exists() {
		t.Error("Cleanup left the group")
	}
	checkNoParent(t, d)
}

// TestJailSpecCgroup: the jail helper refuses a specification without the
// VMM's cgroup or with a cgroup path that is not absolute and clean, and a
// helper given a directory that is no cgroup says so and runs nothing.
func TestJailSpecCgroup(t *testing.T) {
	dir := t.TempDir()
	ok := jailSpec{Root: "/r", Dir: dir, Log: "qemu.log", QEMU: "/bin/true", Args: []string{"-x"}, UID: 1000, GID: 1000,
		Cgroup: []string{"/sys/fs/cgroup/memory/space-vm-x/e1"}}
	if err := ok.validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	for name, bad := range map[string][]string{"none": nil, "relative": {"sys/fs/cgroup/x"}, "unclean": {"/sys/fs/cgroup/memory/../x"}} {
		s := ok
		s.Cgroup = bad
		if err := s.validate(); err == nil {
			t.Errorf("%s cgroup %q: validate accepted it", name, bad)
		}
	}
	notCgroup := ok
	notCgroup.Cgroup = []string{dir}
	b, err := json.Marshal(notCgroup)
	if err != nil {
		t.Fatal(err)
	}
	cmd := reexec.Command(JailHelper, string(b))
	cmd.Dir = dir
	var exit *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 126 {
		t.Errorf("helper with a cgroup that is a plain directory: %v, want exit 126", err)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "qemu.log"))
	if !strings.Contains(string(log), "enter the VMM's cgroup") {
		t.Errorf("helper log %q, want the refusal of the cgroup", log)
	}
}

// TestStopRemovedPassesTakeTurns runs passes of StopRemoved side by side
// (the watcher's and one called directly) over leftover groups: each group
// is reported by exactly one pass, and no pass fails on another's removal.
func TestStopRemovedPassesTakeTurns(t *testing.T) {
	testenv.RequiresRoot(t)
	d, err := New(Config{StateDir: t.TempDir(), Kernel: fakeKernel(t), QEMU: "/bin/true", Log: testLogger(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx := context.Background()
	const rounds, groups, passes = 20, 4, 4
	for r := range rounds {
		var ids []string
		for i := range groups {
			id := fmt.Sprintf("turns-%d-%d", r, i)
			g, err := d.vmmGroup(d.cgroupParent, id)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Create(cgroup.Limits{MemoryBytes: 64 << 20, PidsMax: 8}); err != nil {
				t.Fatalf("create %s: %v", id, err)
			}
			ids = append(ids, id)
			t.Cleanup(func() { _ = d.removeVMMGroups(ctx, id, nil) })
		}
		results := make(chan []string, passes)
		errs := make(chan error, passes)
		for range passes {
			go func() {
				stopped, err := d.StopRemoved(ctx)
				results <- stopped
				errs <- err
			}()
		}
		reported := map[string]int{}
		for range passes {
			for _, id := range <-results {
				reported[id]++
			}
			if err := <-errs; err != nil {
				t.Errorf("round %d: a pass failed: %v", r, err)
			}
		}
		for _, id := range ids {
			if reported[id] != 1 {
				t.Fatalf("round %d: %s reported by %d passes, want 1 (%v)", r, id, reported[id], reported)
			}
		}
	}
	checkNoParent(t, d)
}

// TestLeftoverGroupOfKilledQEMU: a pass of StopRemoved removes the group of
// an execution whose QEMU it has just killed even when the group still lists
// a task (a QEMU whose main thread is a zombie while its other threads exit),
// so a later pass does not report that execution again; a group with a task
// whose QEMU the pass did not kill (a renamed directory) stays.
func TestLeftoverGroupOfKilledQEMU(t *testing.T) {
	testenv.RequiresRoot(t)
	d, err := New(Config{StateDir: t.TempDir(), Kernel: fakeKernel(t), QEMU: "/bin/true", Log: testLogger(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx := context.Background()
	inGroup := func(id string) *exec.Cmd {
		g, err := d.vmmGroup(d.cgroupParent, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Create(cgroup.Limits{MemoryBytes: 64 << 20, PidsMax: 8}); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			_ = d.removeVMMGroups(ctx, id, nil)
		})
		if err := g.AddProc(cmd.Process.Pid); err != nil {
			t.Fatalf("move pid %d into %s: %v", cmd.Process.Pid, id, err)
		}
		return cmd
	}
	killed, renamed := inGroup("killed-x"), inGroup("renamed-y")
	left, err := d.removeLeftoverGroups(ctx, []string{"killed-x"})
	if err != nil {
		t.Fatalf("removeLeftoverGroups: %v", err)
	}
	if !slices.Equal(left, []string{"killed-x"}) {
		t.Errorf("removed %v, want [killed-x]", left)
	}
	if g, _ := d.vmmGroup(d.cgroupParent, "killed-x"); g.Exists() {
		t.Fatal("the killed QEMU's group is still there")
	}
	if err := killed.Wait(); err == nil {
		t.Error("the task left in the killed QEMU's group exited by itself")
	}
	if g, _ := d.vmmGroup(d.cgroupParent, "renamed-y"); !g.Exists() {
		t.Error("the group of a QEMU the pass did not kill was removed")
	}
	if renamed.ProcessState != nil || unix.Kill(renamed.Process.Pid, 0) != nil {
		t.Error("the task of a QEMU the pass did not kill was killed")
	}
}

// TestLeftoverScratchVMs: List leaves out the scratch VM of a template
// snapshot whose builder runs, and lists one whose builder died (its pid
// gone or reused, or an id of the form before builders were named), so
// that a node's gc cleans up what a node-manager killed mid-build left
// (catalogue F-12).
func TestLeftoverScratchVMs(t *testing.T) {
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	d, err := New(Config{StateDir: dir, Kernel: fakeKernel(t), QEMU: "/bin/true", Log: testLogger(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	key := "0123456789abcdef0123456789abcdef"
	building := scratchID(key)
	start, err := driver.ProcStartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("tpl-%s-%d-%d-00000001", key[:16], gone.Process.Pid, start)
	reused := fmt.Sprintf("tpl-%s-%d-%d-00000002", key[:16], os.Getpid(), start+1)
	old := "tpl-" + key[:16] + "-00000003"
	for _, id := range []string{building, dead, reused, old, "sb1-g1-a"} {
		if err := os.MkdirAll(d.execDir(id), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := d.List(context.Background())
	want := []string{"sb1-g1-a", dead, reused, old}
	slices.Sort(want)
	if err != nil || !slices.Equal(ids, want) {
		t.Errorf("List = %v, %v; want %v (not %s, whose builder is this test)", ids, err, want, building)
	}
}
