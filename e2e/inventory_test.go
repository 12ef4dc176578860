package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/driver/vm"
	sandboxid "github.com/spacesandbox/space/internal/sandbox"
)

// hostInventory is what the platform holds on the host for one data
// directory: its processes (the binaries this package built running in
// the directory or naming one of the test's sandboxes, or any process
// naming the directory), mounts under the directory, loop devices
// backed by files in it, the volume store's subvolumes and work in
// progress, the network namespaces and cgroups (under SPACE's "space"
// groups, and an ns execution's top-level "space.<execution>" in the v1 cpu
// hierarchy) named after the test's sandboxes, and the VMMs' cgroups of the
// directory's vm runtime (vmmGroups). The machine is shared, so what
// belongs to other servers is left out.
type hostInventory []string

// inventory lists what the platform holds for dataDir and the sandboxes ids.
func inventory(dataDir string, ids ...string) hostInventory {
	var out []string
	for _, m := range mountsUnder(dataDir) {
		out = append(out, "mount "+m)
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		exe, _ := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		// One of this package's binaries counts when it runs in
		// dataDir (a host bridge runs in its execution's directory) or
		// names one of ids: the servers of the tests running beside
		// this one (t.Parallel) are theirs, not its.
		ours := false
		if bin.dir != "" && strings.HasPrefix(exe, bin.dir+"/") {
			cwd, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
			ours = strings.HasPrefix(cwd, dataDir+"/") || slices.ContainsFunc(ids, func(id string) bool {
				return id != "" && bytes.Contains(cmdline, []byte(id))
			})
		}
		if ours || bytes.Contains(cmdline, []byte(dataDir)) {
			out = append(out, "process "+e.Name()+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		if b, err := os.ReadFile(l); err == nil && strings.HasPrefix(string(b), dataDir) {
			out = append(out, "loop "+l+" "+strings.TrimSpace(string(b)))
		}
	}
	named := func(kind, pattern string) {
		paths, _ := filepath.Glob(pattern)
		for _, p := range paths {
			for _, id := range ids {
				if id != "" && strings.Contains(filepath.Base(p), id) {
					out = append(out, kind+" "+p)
				}
			}
		}
	}
	// The btrfs volume store's subvolumes (node-manager's DATA/volumes:
	// volumes/<exec>, snapshots/<snapshot>, tmp/ for work in progress),
	// visible while its filesystem is mounted (always, when DATA is on
	// btrfs itself).
	named("subvolume", filepath.Join(dataDir, "volumes", "volumes", "*"))
	named("subvolume", filepath.Join(dataDir, "volumes", "snapshots", "*"))
	tmp, _ := filepath.Glob(filepath.Join(dataDir, "volumes", "tmp", "*"))
	for _, p := range tmp {
		out = append(out, "subvolume "+p)
	}
	named("netns", "/run/netns/*")
	named("cgroup", "/sys/fs/cgroup/*/space/*")
	named("cgroup", "/sys/fs/cgroup/space/*")
	named("cgroup", "/sys/fs/cgroup/*/space.*")
	for _, g := range vmmGroups(dataDir) {
		out = append(out, "cgroup "+g)
	}
	slices.Sort(out)
	return out
}

// vmmGroups lists the QEMU cgroups of the vm runtime of the server over
// dataDir: the node-manager's vm driver keeps its state in
// DATA/volumes/vm and puts each VMM in a group <execution id> under
// vm.CgroupParent of that directory, in every v1 hierarchy or under the v2
// root. The parent is the directory's own, so every group under it is the
// test's, whatever sandbox it was for; the parent itself, which the driver
// creates once and keeps, is not listed.
func vmmGroups(dataDir string) []string {
	parent := vm.CgroupParent(filepath.Join(dataDir, "volumes", "vm"))
	var out []string
	for _, pattern := range []string{"/sys/fs/cgroup/*/" + parent + "/*", "/sys/fs/cgroup/" + parent + "/*"} {
		paths, _ := filepath.Glob(pattern)
		for _, p := range paths {
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				out = append(out, p)
			}
		}
	}
	return out
}

// extra is what now holds that before did not.
func (now hostInventory) extra(before hostInventory) []string {
	var out []string
	for _, s := range now {
		if !slices.Contains(before, s) {
			out = append(out, s)
		}
	}
	return out
}

// checkInventory fails the test when, within a few seconds (a stopped
// process's groups go after it), the host still holds for dataDir and ids
// anything that before did not.
func checkInventory(t *testing.T, before hostInventory, dataDir string, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		extra := inventory(dataDir, ids...).extra(before)
		if len(extra) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("left on the host:\n%s%s", strings.Join(extra, "\n"), whereStuck(extra))
			reclaim(t, dataDir)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// inventorySees reports whether inv has an entry of every kind.
func inventorySees(inv []string, kinds ...string) bool {
	for _, k := range kinds {
		if !slices.ContainsFunc(inv, func(s string) bool { return strings.HasPrefix(s, k+" ") }) {
			return false
		}
	}
	return true
}

// reclaim takes back what a failed test left of dataDir — its processes,
// mounts and loop devices — so that the failure is reported once, not again
// by every test after it that shares the directory or the machine.
func reclaim(t testing.TB, dataDir string) {
	t.Helper()
	for _, p := range processesMentioning(dataDir) {
		pid, _, _ := strings.Cut(p, ":")
		if n, err := strconv.Atoi(pid); err == nil && n != os.Getpid() {
			_ = syscall.Kill(n, syscall.SIGKILL)
		}
	}
	time.Sleep(200 * time.Millisecond) // the killed release their mounts' files
	mounts := mountsUnder(dataDir)
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) }) // deepest first
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			t.Logf("reclaim: unmount %s: %v", m, err)
		}
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		if b, err := os.ReadFile(l); err == nil && strings.HasPrefix(string(b), dataDir) {
			dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(l)))
			if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
				t.Logf("reclaim: losetup -d %s: %v %s", dev, err, out)
			}
		}
	}
}

// whereStuck describes the processes of an inventory's entries — their
// state, threads, kernel wait channel and stack, and parent — so that a
// process left behind says where it is stuck.
func whereStuck(entries []string) string {
	var b strings.Builder
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e, "process ")
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, " ")
		proc := filepath.Join("/proc", pid)
		fmt.Fprintf(&b, "\nprocess %s:", pid)
		if st, err := os.ReadFile(filepath.Join(proc, "status")); err == nil {
			for _, l := range strings.Split(string(st), "\n") {
				if k, _, _ := strings.Cut(l, ":"); k == "State" || k == "PPid" || k == "Threads" || k == "SigCgt" || k == "SigBlk" {
					fmt.Fprintf(&b, " %s;", strings.Join(strings.Fields(l), " "))
				}
			}
		}
		if w, err := os.ReadFile(filepath.Join(proc, "wchan")); err == nil {
			fmt.Fprintf(&b, " wchan %s;", w)
		}
		tasks, _ := os.ReadDir(filepath.Join(proc, "task"))
		for i, task := range tasks {
			if i == 8 {
				fmt.Fprintf(&b, "\n  … %d threads more", len(tasks)-i)
				break
			}
			stack, _ := os.ReadFile(filepath.Join(proc, "task", task.Name(), "stack"))
			fmt.Fprintf(&b, "\n  thread %s: %s", task.Name(), strings.Join(strings.Fields(string(stack)), " "))
		}
	}
	return b.String()
}

// TestInventoryScopesCgroups: the inventory lists the cgroups named after
// the sandboxes it is given (an execution's group is named
// <sandbox>-g<generation>-<suffix> under "space") and no other, so that a
// test's check is not failed by another server's sandboxes on the shared
// host, while a group of its own left behind is.
func TestInventoryScopesCgroups(t *testing.T) {
	parents, _ := filepath.Glob("/sys/fs/cgroup/*/space")
	if v2 := "/sys/fs/cgroup/space"; len(parents) == 0 {
		if _, err := os.Stat(v2); err == nil {
			parents = []string{v2}
		}
	}
	if len(parents) == 0 {
		t.Skip("no space cgroup parent on this host (no server has run here)")
	}
	ours, theirs := sandboxid.NewID(), sandboxid.NewID()
	groups := []string{filepath.Join(parents[0], sandboxid.NewExecID(ours, 1)), filepath.Join(parents[0], sandboxid.NewExecID(theirs, 1))}
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.shares"); err == nil {
		// An ns execution's own top-level group in the v1 cpu hierarchy
		// (cgroup.Hierarchy.OwnCPUGroup).
		groups = append(groups, "/sys/fs/cgroup/cpu/space."+sandboxid.NewExecID(ours, 2))
	}
	for _, g := range groups {
		if err := os.Mkdir(g, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := os.Remove(g); err != nil {
				t.Errorf("remove the test's group: %v", err)
			}
		})
	}
	dir := t.TempDir()
	got := inventory(dir, ours)
	for _, g := range groups {
		if strings.Contains(g, ours) && !slices.Contains(got, "cgroup "+g) {
			t.Errorf("the inventory of sandbox %s misses its group %s:\n%s", ours, g, strings.Join(got, "\n"))
		}
	}
	if slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, theirs) }) {
		t.Errorf("the inventory of sandbox %s lists another sandbox's group:\n%s", ours, strings.Join(got, "\n"))
	}
	if none := inventory(dir); slices.ContainsFunc(none, func(s string) bool { return strings.Contains(s, ours) || strings.Contains(s, theirs) }) {
		t.Errorf("the inventory of no sandbox lists groups:\n%s", strings.Join(none, "\n"))
	}
}

// TestInventoryListsVMMGroups: the inventory of a data directory lists the
// QEMU cgroups its vm runtime left (space-vm-<digest of DATA/volumes/vm>/
// <execution id>), under every hierarchy, and not those of another
// directory's runtime, so that a crash test's check sees a VMM group its
// server leaked while other servers' VMs on the shared host pass by.
func TestInventoryListsVMMGroups(t *testing.T) {
	mounts := []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids"}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		mounts = []string{"/sys/fs/cgroup"} // v2: one hierarchy
	}
	ours, theirs := t.TempDir(), t.TempDir()
	execID := sandboxid.NewExecID(sandboxid.NewID(), 1)
	var want []string
	for _, dir := range []string{ours, theirs} {
		parent := vm.CgroupParent(filepath.Join(dir, "volumes", "vm"))
		for _, m := range mounts {
			g := filepath.Join(m, parent, execID)
			if err := os.MkdirAll(g, 0o755); err != nil {
				t.Skipf("cannot create a cgroup on this host (%v): run as root on a host with cgroups", err)
			}
			t.Cleanup(func() {
				for _, d := range []string{g, filepath.Dir(g)} {
					if err := os.Remove(d); err != nil {
						t.Errorf("remove the test's group: %v", err)
					}
				}
			})
			if dir == ours {
				want = append(want, "cgroup "+g)
			}
		}
	}
	got := inventory(ours)
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("the inventory of %s misses its VMM group %s:\n%s", ours, w, strings.Join(got, "\n"))
		}
	}
	theirParent := vm.CgroupParent(filepath.Join(theirs, "volumes", "vm"))
	if slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, theirParent) }) {
		t.Errorf("the inventory of %s lists another directory's VMM group:\n%s", ours, strings.Join(got, "\n"))
	}
}

func TestWhereStuckDescribesAProcess(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	time.Sleep(100 * time.Millisecond)
	got := whereStuck([]string{"mount /x", "process " + strconv.Itoa(cmd.Process.Pid) + " sleep 30"})
	for _, want := range []string{"process " + strconv.Itoa(cmd.Process.Pid) + ":", "State: S", "PPid: " + strconv.Itoa(os.Getpid()), "thread "} {
		if !strings.Contains(got, want) {
			t.Errorf("whereStuck misses %q:\n%s", want, got)
		}
	}
}
