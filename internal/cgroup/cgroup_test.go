package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/testenv"
)

const hybridMountinfo = `21 26 0:20 / /proc rw,relatime - proc proc rw
30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

const v2Mountinfo = `25 1 8:1 / / rw - ext4 /dev/sda1 rw
29 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`

const comountedMountinfo = `31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:7 - cgroup cgroup rw,cpu,cpuacct
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
35 30 0:32 /docker/abc /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
37 30 0:34 / /sys/fs/cgroup/pids\040x rw,relatime - cgroup cgroup rw,pids
`

func TestParseMountinfo(t *testing.T) {
	h, err := ParseMountinfo([]byte(hybridMountinfo))
	if err != nil {
		t.Fatalf("hybrid: %v", err)
	}
	if h.Mode != V1 || !h.Hybrid || h.V2 != "/sys/fs/cgroup/unified" || h.V1["memory"] != "/sys/fs/cgroup/memory" || h.V1["cpuacct"] != "/sys/fs/cgroup/cpuacct" {
		t.Errorf("hybrid: got %+v", h)
	}
	h, err = ParseMountinfo([]byte(v2Mountinfo))
	if err != nil || h.Mode != V2 || h.Hybrid || h.V2 != "/sys/fs/cgroup" {
		t.Errorf("v2: got %+v, %v", h, err)
	}
	h, err = ParseMountinfo([]byte(comountedMountinfo))
	if err != nil {
		t.Fatalf("co-mounted: %v", err)
	}
	if h.V1["cpu"] != "/sys/fs/cgroup/cpu,cpuacct" || h.V1["cpuacct"] != h.V1["cpu"] || h.V1["pids"] != "/sys/fs/cgroup/pids x" {
		t.Errorf("co-mounted: got %+v (the /docker bind must be skipped, \\040 unescaped)", h.V1)
	}
	g, err := h.Group("space", "e1")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(g.Dirs()); n != 4 {
		t.Errorf("co-mounted group has %d dirs (%v), want 4", n, g.Dirs())
	}
	if _, err := ParseMountinfo([]byte("25 1 8:1 / / rw - ext4 /dev/sda1 rw\n")); err == nil {
		t.Error("no cgroup mounts: want an error")
	}
	if _, err := ParseMountinfo([]byte("34 30 0:31 / /m rw - cgroup cgroup rw,memory\n")); err == nil {
		t.Error("v1 without pids and freezer: want an error")
	}
}

func TestGroupNames(t *testing.T) {
	h := &Hierarchy{Mode: V2, V2: "/sys/fs/cgroup"}
	for _, bad := range []string{"", ".", "..", "a/b", "A", "x\x00"} {
		if _, err := h.Group("space", bad); err == nil {
			t.Errorf("Group(space, %q): want an error", bad)
		}
	}
	g, err := h.Group("space", "e-1")
	if err != nil || g.Dirs()[0] != "/sys/fs/cgroup/space/e-1" {
		t.Errorf("Group: %v %v", g, err)
	}
}

func TestOwnCPUGroupDirs(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    *Hierarchy
		want []string
	}{
		{"v1", &Hierarchy{Mode: V1, V1: map[string]string{"cpu": "/c/cpu", "cpuacct": "/c/cpuacct", "memory": "/c/memory"}},
			[]string{"/c/cpu/space.e-1", "/c/cpuacct/space/e-1", "/c/memory/space/e-1"}},
		// cpu and cpuacct mounted as one hierarchy: one directory in it.
		{"v1 cpu,cpuacct", &Hierarchy{Mode: V1, V1: map[string]string{"cpu": "/c/cpu,cpuacct", "cpuacct": "/c/cpu,cpuacct", "pids": "/c/pids"}},
			[]string{"/c/cpu,cpuacct/space.e-1", "/c/pids/space/e-1"}},
		{"v1 without cpu", &Hierarchy{Mode: V1, V1: map[string]string{"memory": "/c/memory"}},
			[]string{"/c/memory/space/e-1"}},
		{"v2", &Hierarchy{Mode: V2, V2: "/c"}, []string{"/c/space/e-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := tc.h.OwnCPUGroup("space", "e-1")
			if err != nil {
				t.Fatal(err)
			}
			if got := g.Dirs(); !slices.Equal(got, tc.want) {
				t.Errorf("Dirs() = %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := (&Hierarchy{Mode: V1, V1: map[string]string{"cpu": "/c/cpu"}}).OwnCPUGroup("space", "a/b"); err == nil {
		t.Error("OwnCPUGroup(space, a/b): want an error")
	}
}

// TestOwnCPUGroup creates an own-CPU group on this host: on cgroup v1 a
// process in it is in a top-level group of the cpu hierarchy, weighted and
// capped by the group's CPUs, and Delete removes that group.
func TestOwnCPUGroup(t *testing.T) {
	testenv.RequiresRoot(t)
	h, err := Detect()
	if err != nil {
		t.Skipf("skipping: no usable cgroups: %v", err)
	}
	ctx := context.Background()
	parent := testParent(t, h)
	g, err := h.OwnCPUGroup(parent, "own")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Create(Limits{MemoryBytes: 64 << 20, PidsMax: 16, CPUs: 2}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = g.Kill(ctx); _ = g.Delete(ctx) })
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		t.Fatalf("AddProc: %v", err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var cpuDir string
	if h.Mode == V1 {
		cpuDir = filepath.Join(h.V1["cpu"], parent+".own")
		if got, want := cgroupIn(b, "cpu"), "/"+parent+".own"; got != want {
			t.Errorf("/proc/%d/cgroup: cpu %q, want the top-level group %q", cmd.Process.Pid, got, want)
		}
		if got, want := cgroupIn(b, "memory"), "/"+parent+"/own"; got != want {
			t.Errorf("/proc/%d/cgroup: memory %q, want %q", cmd.Process.Pid, got, want)
		}
		checkValue(t, cpuDir, "cpu.shares", "2048")
		checkValue(t, cpuDir, "cpu.cfs_quota_us", "200000")
	} else if exists(filepath.Join(h.V2, parent, "own"), "cpu.weight") {
		checkValue(t, filepath.Join(h.V2, parent, "own"), "cpu.weight", "200")
	}
	if err := g.Kill(ctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	<-done
	if err := g.Delete(ctx); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if g.Exists() {
		t.Errorf("group still exists after Delete: %v", g.Dirs())
	}
}

// cgroupIn is the path of the v1 hierarchy of controller ctrl in
// /proc/PID/cgroup's text b ("4:memory:/x", "1:cpu,cpuacct:/y").
func cgroupIn(b []byte, ctrl string) string {
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), ctrl) {
			return f[2]
		}
	}
	return ""
}

func checkValue(t *testing.T, dir, file, want string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != want {
		t.Errorf("%s/%s = %q, want %q", dir, file, got, want)
	}
}

func TestParsers(t *testing.T) {
	if p, err := ParsePids([]byte("1\n22\n")); err != nil || len(p) != 2 || p[1] != 22 {
		t.Errorf("ParsePids = %v, %v", p, err)
	}
	if _, err := ParsePids([]byte("1\n-2\n")); err == nil {
		t.Error("ParsePids(-2): want an error")
	}
	if v, err := ParseUintOrMax([]byte("max\n")); err != nil || v != 0 {
		t.Errorf("ParseUintOrMax(max) = %d, %v", v, err)
	}
	if v, err := ParseUintOrMax([]byte("4096\n")); err != nil || v != 4096 {
		t.Errorf("ParseUintOrMax(4096) = %d, %v", v, err)
	}
	if v, err := ParseCPUStatUsage([]byte("usage_usec 1500\nuser_usec 1000\n")); err != nil || v != 1500 {
		t.Errorf("ParseCPUStatUsage = %d, %v", v, err)
	}
	if _, err := ParseCPUStatUsage([]byte("user_usec 1\n")); err == nil {
		t.Error("ParseCPUStatUsage without usage_usec: want an error")
	}
	stat := []byte("cache 8192\nrss 4096\ntotal_cache 16384\n")
	if v, err := ParseStatValue(stat, "cache"); err != nil || v != 8192 {
		t.Errorf("ParseStatValue(cache) = %d, %v; want 8192 (not total_cache)", v, err)
	}
	if _, err := ParseStatValue(stat, "file"); err == nil {
		t.Error("ParseStatValue of a missing key: want an error")
	}
	if _, err := ParseStatValue([]byte("cache -1\n"), "cache"); err == nil {
		t.Error("ParseStatValue of a negative value: want an error")
	}
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add([]byte(hybridMountinfo))
	f.Add([]byte(v2Mountinfo))
	f.Add([]byte(comountedMountinfo))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseMountinfo(b)
		if err == nil && h.Mode != V1 && h.Mode != V2 {
			t.Fatalf("no error but mode %v", h.Mode)
		}
	})
}

// testParent returns a per-test parent group name and removes the parent
// directories when the test ends.
func testParent(t *testing.T, h *Hierarchy) string {
	parent := fmt.Sprintf("space-test-%d", os.Getpid())
	t.Cleanup(func() {
		var dirs []string
		if h.Mode == V2 {
			dirs = append(dirs, filepath.Join(h.V2, parent))
		}
		for _, m := range h.V1 {
			dirs = append(dirs, filepath.Join(m, parent))
		}
		for _, d := range dirs {
			if err := unix.Rmdir(d); err != nil && err != unix.ENOENT {
				t.Logf("remove %s: %v", d, err)
			}
		}
	})
	return parent
}

func TestGroupLifecycle(t *testing.T) {
	testenv.RequiresRoot(t)
	h, err := Detect()
	if err != nil {
		t.Skipf("skipping: no usable cgroups: %v", err)
	}
	ctx := context.Background()
	g, err := h.Group(testParent(t, h), "lifecycle")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Create(Limits{MemoryBytes: 64 << 20, PidsMax: 16, CPUs: 1}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = g.Kill(ctx); _ = g.Delete(ctx) })
	if err := g.Create(Limits{}); err == nil {
		t.Fatal("second Create: want a Conflict error")
	}
	// The shell forks only once it is in the group (it waits for a line).
	cmd := exec.Command("sh", "-c", "read go; sleep 600 & sleep 600")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		t.Fatalf("AddProc: %v", err)
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.Pids < 1 || st.MemoryLimitBytes != 64<<20 {
		t.Errorf("Stats = %+v, want pids >= 1 and a 64 MiB limit", st)
	}
	if st.MemoryPeakBytes < st.MemoryBytes && (h.Mode == V1 || st.MemoryPeakBytes != 0) {
		t.Errorf("Stats = %+v, want a peak of at least the memory charged now", st)
	}
	if err := g.Freeze(ctx); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	if fz, err := g.Frozen(); err != nil || !fz {
		t.Errorf("Frozen() = %v, %v after Freeze", fz, err)
	}
	if err := g.Thaw(ctx); err != nil {
		t.Fatalf("Thaw: %v", err)
	}
	if err := g.Kill(ctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	<-done
	if pids, err := g.Procs(); err != nil || len(pids) != 0 {
		t.Errorf("Procs after Kill = %v, %v; want none", pids, err)
	}
	if err := g.Delete(ctx); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if g.Exists() {
		t.Error("group still exists after Delete")
	}
	if err := g.Delete(ctx); err != nil {
		t.Errorf("second Delete: %v, want nil", err)
	}
}

// enterDirsEnv passes the group directories to TestEnterHelper, this test
// binary run as a child that enters them.
const enterDirsEnv = "SPACE_CGROUP_TEST_ENTER"

// TestEnterHelper is not a test: run by TestEnter as a child process, it
// enters the groups named in its environment and prints its cgroups.
func TestEnterHelper(t *testing.T) {
	dirs := os.Getenv(enterDirsEnv)
	if dirs == "" {
		t.Skip("helper of TestEnter")
	}
	if err := Enter(strings.Split(dirs, ":")); err != nil {
		fmt.Println("enter:", err)
		os.Exit(3)
	}
	b, _ := os.ReadFile("/proc/self/cgroup")
	os.Stdout.Write(b)
	os.Exit(0)
}

func TestEnter(t *testing.T) {
	// Refusals come before any write, so they are safe to try in this
	// process.
	for _, bad := range [][]string{nil, {"relative/x"}, {"/sys/fs/cgroup/memory/../memory/x"}, {t.TempDir()}} {
		if err := Enter(bad); err == nil {
			t.Errorf("Enter(%q): want an error", bad)
		}
	}
	testenv.RequiresRoot(t)
	h, err := Detect()
	if err != nil {
		t.Skipf("skipping: no usable cgroups: %v", err)
	}
	var roots []string
	if h.Mode == V2 {
		roots = append(roots, h.V2)
	}
	for _, m := range h.V1 {
		roots = append(roots, m)
	}
	for _, r := range roots {
		if err := Enter([]string{r}); err == nil {
			t.Fatalf("Enter(%s): entered a hierarchy's root", r)
		}
	}
	ctx := context.Background()
	parent := testParent(t, h)
	g, err := h.Group(parent, "enter")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Create(Limits{MemoryBytes: 64 << 20, PidsMax: 64}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = g.Kill(ctx); _ = g.Delete(ctx) })
	if names, err := h.Children(parent); err != nil || !slices.Equal(names, []string{"enter"}) {
		t.Errorf("Children(%s) = %v, %v; want [enter]", parent, names, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEnterHelper$")
	cmd.Env = append(os.Environ(), enterDirsEnv+"="+strings.Join(g.Dirs(), ":"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	for _, d := range g.Dirs() {
		rel := "/" + parent + "/enter"
		if !strings.Contains(string(out), rel) {
			t.Errorf("the helper's /proc/self/cgroup lacks %s (group dir %s):\n%s", rel, d, out)
		}
	}
	if err := h.RemoveParent(parent); err != nil {
		t.Errorf("RemoveParent with a group left: %v, want nil", err)
	}
	if !g.Exists() {
		t.Fatal("RemoveParent removed a parent that still had a group")
	}
	if err := g.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.RemoveParent(parent); err != nil {
		t.Fatalf("RemoveParent: %v", err)
	}
	for _, d := range h.parentDirs(parent) {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("parent %s left after RemoveParent: %v", d, err)
		}
	}
	if names, err := h.Children(parent); err != nil || len(names) != 0 {
		t.Errorf("Children of a removed parent = %v, %v; want none", names, err)
	}
}

// TestChild makes a child group in the memory and pids hierarchies of a
// group, moves one thread of a process into it through its tasks files, and
// checks that the process it forks is born there under the child's limits,
// that Kill of the parent reaches it, and that Delete of the parent removes
// the child too.
func TestChild(t *testing.T) {
	testenv.RequiresRoot(t)
	h, err := Detect()
	if err != nil {
		t.Skipf("skipping: no usable cgroups: %v", err)
	}
	ctx := context.Background()
	g, err := h.Group(testParent(t, h), "child")
	if err != nil {
		t.Fatal(err)
	}
	if h.Mode == V2 {
		if _, err := g.Child("w", "memory", "pids"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("Child on cgroup v2: %v, want FailedPrecondition", err)
		}
		return
	}
	if err := g.Create(Limits{MemoryBytes: 64 << 20, PidsMax: 16}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = g.Kill(cctx)
		_ = g.Delete(cctx)
	})
	if _, err := g.Child("w", "memory", "no-such-controller"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Child in a hierarchy the group is not in: %v, want FailedPrecondition", err)
	}
	c, err := g.Child("w", "memory", "pids")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(Limits{MemoryBytes: 32 << 20, PidsMax: 4}); err != nil {
		t.Fatalf("Create child: %v", err)
	}
	if len(c.Dirs()) != 2 {
		t.Errorf("child dirs %v, want one in memory and one in pids", c.Dirs())
	}
	files, err := c.TaskFiles("memory", "pids")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	// A shell in the parent writes its own pid (its one thread) to the
	// child's tasks files, then forks a sleeper there.
	fds := ""
	for i := range files {
		fds += fmt.Sprintf(" %d", 3+i)
	}
	cmd := exec.Command("sh", "-c", "read go; for fd in"+fds+"; do echo $$ >&$fd; done; sleep 600 & echo $!; wait")
	cmd.ExtraFiles = files
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		t.Fatalf("AddProc: %v", err)
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	var sleeper int
	if _, err := fmt.Fscan(stdout, &sleeper); err != nil {
		t.Fatalf("read the sleeper's pid: %v", err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", sleeper))
	if err != nil {
		t.Fatal(err)
	}
	for _, ctrl := range []string{"memory", "pids", "freezer"} {
		want := "/child"
		if ctrl != "freezer" {
			want = "/child/w"
		}
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), ctrl) {
				found = strings.HasSuffix(f[2], want)
			}
		}
		if !found {
			t.Errorf("the forked process's %s group is not …%s:\n%s", ctrl, want, b)
		}
	}
	if st, err := c.Stats(); err != nil || st.MemoryLimitBytes != 32<<20 {
		t.Errorf("child Stats = %+v, %v; want a 32 MiB limit", st, err)
	}
	if err := g.Kill(ctx); err != nil {
		t.Fatalf("Kill of the parent: %v", err)
	}
	<-done
	// Kill returns once the group is empty; the orphan may still be a
	// zombie waiting for init.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", sleeper)); err == nil {
		if i := strings.LastIndexByte(string(b), ')'); i < 0 || i+2 >= len(b) || (b[i+2] != 'Z' && b[i+2] != 'X') {
			t.Errorf("the process in the child group survived Kill of the parent: %s", b)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := g.Delete(dctx); err != nil {
		t.Fatalf("Delete of the parent with a child: %v", err)
	}
	if g.Exists() || c.Exists() {
		t.Errorf("after Delete: parent exists %v, child exists %v", g.Exists(), c.Exists())
	}
}
