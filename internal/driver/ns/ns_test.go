package ns

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/cgroup"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/reexec"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/volume/btrfs"
)

// guestBinary is the test guest (testdata/guest) built once by TestMain.
var guestBinary string

func TestMain(m *testing.M) {
	reexec.Run(reexec.Helpers{InitHelper: InitMain})
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ns-guest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if os.Geteuid() == 0 {
		guestBinary = filepath.Join(dir, "guest")
		cmd := exec.Command("go", "build", "-o", guestBinary, "./testdata/guest")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build test guest: %v\n%s", err, out)
			return 1
		}
	}
	return m.Run()
}

// busyboxRoot builds a tiny root filesystem: busybox-static and one relative
// symlink per applet.
func busyboxRoot(t *testing.T) string {
	t.Helper()
	bb := testenv.RequiresTool(t, "busybox")
	root := filepath.Join(t.TempDir(), "root")
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("file", "-L", bb).CombinedOutput(); err == nil && !strings.Contains(string(out), "statically linked") {
		t.Skipf("skipping: %s is not static (install busybox-static)", bb)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatalf("busybox --list: %v", err)
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func testConfig(t *testing.T, stateDir string) Config {
	return Config{
		StateDir:     stateDir,
		CgroupParent: "space-test-" + strconv.Itoa(os.Getpid()),
		UIDBase:      200_000_000,
		Slots:        64,
	}
}

func newDriver(t *testing.T, cfg Config) *Driver {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { removeParentGroups(t, d) })
	return d
}

// removeParentGroups removes the test's parent cgroups once empty.
func removeParentGroups(t *testing.T, d *Driver) {
	g, err := d.hier.Group(d.cfg.CgroupParent, "x")
	if err != nil {
		return
	}
	for _, dir := range g.Dirs() {
		_ = os.Remove(filepath.Dir(dir))
	}
}

// sandbox is a started execution and a client of the test guest.
type sandbox struct {
	inst *driver.Instance
	in   *bufio.Reader
}

func startSandbox(t *testing.T, d *Driver, spec driver.Spec) *sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inst, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		inst.Channel.Close()
		_ = d.Cleanup(context.Background(), spec.ExecID)
		d.Wait()
	})
	return &sandbox{inst: inst, in: bufio.NewReader(inst.Channel)}
}

// run executes line in the sandbox and returns its output and exit code.
func (s *sandbox) run(t *testing.T, line string) (string, int) {
	t.Helper()
	if _, err := io.WriteString(s.inst.Channel, line+"\n"); err != nil {
		t.Fatalf("send %q: %v", line, err)
	}
	var out strings.Builder
	for {
		l, err := s.in.ReadString('\n')
		if err != nil {
			t.Fatalf("run %q: read: %v (output so far %q)", line, err, out.String())
		}
		if code, ok := strings.CutPrefix(l, "@@exit "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(code))
			return out.String(), n
		}
		out.WriteString(l)
	}
}

func (s *sandbox) want(t *testing.T, line, want string) {
	t.Helper()
	out, code := s.run(t, line)
	if code != 0 || strings.TrimSpace(out) != want {
		t.Errorf("%q: got %q (exit %d), want %q", line, out, code, want)
	}
}

func spec(t *testing.T, id string) driver.Spec {
	return driver.Spec{
		ExecID: id, SandboxID: "sb-" + id, RootFS: busyboxRoot(t), GuestBinary: guestBinary,
		Hostname: "box-" + id, CPUs: 1, MemoryMiB: 64, PidsMax: 64,
	}
}

func TestIsolation(t *testing.T) {
	testenv.RequiresRoot(t)
	d := newDriver(t, testConfig(t, t.TempDir()))
	sp := spec(t, "iso")
	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startSandbox(t, d, sp)
	ctx := context.Background()

	s.want(t, "readlink /proc/1/exe", GuestPath)
	s.want(t, "hostname", "box-iso")
	s.want(t, "id -u", "0")
	out, _ := s.run(t, "ls /proc | grep -c '^[0-9]*$'")
	if n, _ := strconv.Atoi(strings.TrimSpace(out)); n < 1 || n > 5 {
		t.Errorf("the sandbox sees %q processes in /proc, want only its own few", out)
	}
	for _, p := range []string{secret, "/etc/passwd", "/proc/" + strconv.Itoa(os.Getpid())} {
		if out, code := s.run(t, "cat "+p); code == 0 {
			t.Errorf("host file %s is visible in the sandbox: %q", p, out)
		}
	}
	out, _ = s.run(t, "cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '")
	if strings.TrimSpace(out) != "lo" {
		t.Errorf("network interfaces: %q, want only lo", out)
	}
	s.want(t, "!mount", "EPERM")
	s.want(t, "!unshare", "EPERM")
	s.want(t, "!unshare-ns", "EPERM")

	status, err := os.ReadFile("/proc/" + strconv.Itoa(s.inst.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	st, _ := d.loadState("iso")
	if want := fmt.Sprintf("Uid:\t%d\t%d", st.UIDBase, st.UIDBase); !strings.Contains(string(status), want) {
		t.Errorf("host view of the sandbox init: no %q in\n%s", want, status)
	}
	if st.UIDBase < d.cfg.UIDBase {
		t.Errorf("uid base %d below the configured range", st.UIDBase)
	}

	// Writes by the sandbox's root land as host root through the id map.
	s.want(t, "echo hi > /written && cat /written", "hi")
	if uid := mustStat(t, filepath.Join(sp.RootFS, "written")); uid != 0 {
		t.Errorf("file written by sandbox root is owned by host uid %d, want 0 (id-mapped rootfs)", uid)
	}

	// Memory: a process allocating past the 64 MiB cap is OOM-killed.
	if out, code := s.run(t, GuestPath+" --alloc 256"); code != 137 {
		t.Errorf("allocating 256 MiB under a 64 MiB cap: exit %d (%q), want 137 (SIGKILL)", code, out)
	}
	stats, err := d.Stats(ctx, "iso")
	if err != nil || stats.MemoryLimitBytes != 64<<20 || stats.Pids == 0 {
		t.Errorf("Stats = %+v, %v; want a 64 MiB limit and some pids", stats, err)
	}
	// The page cache of what the sandbox wrote is charged to it, and read.
	s.want(t, "dd if=/dev/zero of=/cached bs=1M count=8 2>/dev/null && echo done", "done")
	if stats, err := d.Stats(ctx, "iso"); err != nil || stats.MemoryCacheBytes < 4<<20 || stats.MemoryCacheBytes > stats.MemoryBytes {
		t.Errorf("Stats after writing 8 MiB = %+v, %v; want at least 4 MiB of page cache, within the memory charged", stats, err)
	}

	// Pause and resume.
	if err := d.Pause(ctx, "iso"); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := d.Resume(ctx, "iso"); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	s.want(t, "echo back", "back")

	forkBomb(t, d, s)

	if err := d.Kill(ctx, "iso"); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if alive, err := d.Alive(ctx, "iso"); err != nil || alive {
		t.Errorf("Alive after Kill = %v, %v", alive, err)
	}
	g, _ := d.group(st)
	if pids, err := g.Procs(); err != nil || len(pids) != 0 {
		t.Errorf("processes left after Kill: %v, %v", pids, err)
	}
	if err := d.Cleanup(ctx, "iso"); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	assertClean(t, d, st)
}

// forkBomb starts a fork bomb and checks that pids.max holds it and the host
// can still fork.
func forkBomb(t *testing.T, d *Driver, s *sandbox) {
	t.Helper()
	// Each shell forks copies of itself in a loop: a shell whose fork fails
	// at the cap exits, but the others keep the bomb growing back, so the
	// sampling below sees it at the cap (the classic f|f& can die out).
	s.run(t, "b(){ while :; do b & done; }; b >/dev/null 2>&1 </dev/null &")
	g, _ := d.hier.Group(d.cfg.CgroupParent, "iso")
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := g.Stats()
		if err != nil {
			t.Fatalf("Stats during fork bomb: %v", err)
		}
		if st.Pids > 64 {
			t.Fatalf("fork bomb reached %d tasks, over pids.max 64", st.Pids)
		}
		if st.Pids >= 56 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fork bomb: only %d tasks after 30 s; it should have hit pids.max 64", st.Pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := exec.Command("true").Run(); err != nil {
		t.Fatalf("the host cannot fork during the sandbox's fork bomb: %v", err)
	}
}

func assertClean(t *testing.T, d *Driver, st *state) {
	t.Helper()
	g, _ := d.group(st)
	if g.Exists() {
		t.Errorf("cgroup of %s left behind: %v", st.ExecID, g.Dirs())
	}
	if _, err := os.Stat(d.execDir(st.ExecID)); !os.IsNotExist(err) {
		t.Errorf("state of %s left behind: %v", st.ExecID, err)
	}
	if n := int((st.UIDBase - d.cfg.UIDBase) / RangeSize); fileExists(d.slotPath(n)) {
		t.Errorf("uid slot %d of %s not released", n, st.SandboxID)
	}
	if driver.ProcAlive(st.Pid, st.StartTime) {
		t.Errorf("sandbox init %d still alive", st.Pid)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func TestRestartedDriverManagesOldExecution(t *testing.T) {
	testenv.RequiresRoot(t)
	cfg := testConfig(t, t.TempDir())
	old := newDriver(t, cfg)
	s := startSandbox(t, old, spec(t, "restart"))
	s.want(t, "echo up", "up")

	ctx := context.Background()
	d := newDriver(t, cfg) // a new process would build the same from the same state dir
	if alive, err := d.Alive(ctx, "restart"); err != nil || !alive {
		t.Fatalf("new driver: Alive = %v, %v; want true", alive, err)
	}
	if st, err := d.Stats(ctx, "restart"); err != nil || st.Pids == 0 {
		t.Fatalf("new driver: Stats = %+v, %v", st, err)
	}
	st, err := d.loadState("restart")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Kill(ctx, "restart"); err != nil {
		t.Fatalf("new driver: Kill: %v", err)
	}
	if alive, _ := d.Alive(ctx, "restart"); alive {
		t.Error("alive after Kill by the new driver")
	}
	if err := d.Cleanup(ctx, "restart"); err != nil {
		t.Fatalf("new driver: Cleanup: %v", err)
	}
	assertClean(t, d, st)
	if err := d.Cleanup(ctx, "restart"); err != nil {
		t.Errorf("second Cleanup: %v, want nil", err)
	}
	if err := d.Kill(ctx, "restart"); !errdefs.IsNotFound(err) {
		t.Errorf("Kill after Cleanup: %v, want NotFound", err)
	}
}

func TestShiftedRootFallback(t *testing.T) {
	testenv.RequiresRoot(t)
	cfg := testConfig(t, t.TempDir())
	cfg.DisableIDMap = true
	d := newDriver(t, cfg)
	sp := spec(t, "shift")
	s := startSandbox(t, d, sp)
	s.want(t, "id -u && touch /made && stat -c %u /made", "0\n0")
	st, _ := d.loadState("shift")
	if !st.Shifted {
		t.Fatal("state does not record the shifted rootfs")
	}
	var sb = mustStat(t, filepath.Join(sp.RootFS, "made"))
	if sb != st.UIDBase {
		t.Errorf("file made by sandbox root is owned by host uid %d, want %d", sb, st.UIDBase)
	}
}

func mustStat(t *testing.T, p string) uint32 {
	t.Helper()
	out, err := exec.Command("stat", "-c", "%u", p).Output()
	if err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 32)
	return uint32(n)
}

func TestStartFailuresLeaveNothing(t *testing.T) {
	testenv.RequiresRoot(t)
	d := newDriver(t, testConfig(t, t.TempDir()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	sp := spec(t, "badroot")
	if err := os.Symlink("/", filepath.Join(sp.RootFS, "proc")); err != nil {
		t.Fatal(err)
	}
	_, err := d.Start(ctx, sp)
	if err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("Start with /proc a symlink: %v, want the ns-init refusal", err)
	}
	assertClean(t, d, &state{ExecID: "badroot", SandboxID: sp.SandboxID, CgroupParent: d.cfg.CgroupParent, UIDBase: d.cfg.UIDBase})

	sp = spec(t, "badspec")
	sp.RootFS = "relative/path"
	if _, err := d.Start(ctx, sp); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Start with a relative rootfs: %v, want InvalidArgument", err)
	}
	d.Wait()
}

func TestCgroupParentDefault(t *testing.T) {
	if _, err := cgroup.Detect(); err != nil {
		t.Skipf("skipping: no cgroups: %v", err)
	}
	d, err := New(Config{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if d.cfg.CgroupParent != "space" || d.cfg.UIDBase != 1_000_000 || d.Name() != "ns" || !d.Features().SharesHostKernel {
		t.Errorf("defaults: %+v", d.cfg)
	}
}

// TestIDMappedRootOnBtrfs runs a sandbox whose root is a btrfs subvolume, as
// on a node: the id-mapped mount must work there without the chown fallback.
func TestIDMappedRootOnBtrfs(t *testing.T) {
	testenv.RequiresBtrfs(t)
	ctx := context.Background()
	dir := t.TempDir()
	l, err := btrfs.MountLoopback(ctx, filepath.Join(dir, "img"), filepath.Join(dir, "mnt"), 256<<20)
	if err != nil {
		t.Fatalf("MountLoopback: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Unmount(context.Background()); err != nil {
			t.Errorf("Unmount: %v", err)
		}
	})
	vols, err := btrfs.New(filepath.Join(l.Mountpoint, "store"))
	if err != nil {
		t.Fatal(err)
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
	root, err := vols.Clone(ctx, "busybox", "btrfs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vols.Delete(context.Background(), "btrfs") })

	d := newDriver(t, testConfig(t, t.TempDir()))
	sp := spec(t, "btrfs")
	sp.RootFS = root
	s := startSandbox(t, d, sp)
	s.want(t, "echo hi > /x && id -u", "0")
	if st, _ := d.loadState("btrfs"); st.Shifted {
		t.Error("the btrfs rootfs fell back to chown; want an id-mapped mount")
	}
	if uid := mustStat(t, filepath.Join(root, "x")); uid != 0 {
		t.Errorf("file written by sandbox root on btrfs: host uid %d, want 0", uid)
	}
	if err := d.Cleanup(ctx, "btrfs"); err != nil {
		t.Fatal(err)
	}
}

// TestExecutionIsItsOwnCPUEntity: on cgroup v1 every execution's cpu
// group is a top-level group of its own (cgroup.Hierarchy.OwnCPUGroup),
// never below a parent it shares with other sandboxes, which the scheduler
// would bill for a busy neighbour's time (catalogue C-4); its other
// controllers stay below CgroupParent, and Cleanup removes both.
func TestExecutionIsItsOwnCPUEntity(t *testing.T) {
	testenv.RequiresRoot(t)
	d := newDriver(t, testConfig(t, t.TempDir()))
	if d.hier.Mode != cgroup.V1 || d.hier.V1["cpu"] == "" {
		t.Skipf("skipping: the host's cgroups are %v without a v1 cpu hierarchy; OwnCPUGroup is Group there", d.hier.Mode)
	}
	var states []*state
	for _, id := range []string{"cpu-a", "cpu-b"} {
		sp := spec(t, id)
		sp.CPUs = 2
		s := startSandbox(t, d, sp)
		b, err := os.ReadFile("/proc/" + strconv.Itoa(s.inst.Pid) + "/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		parent := d.cfg.CgroupParent
		if got, want := cgroupIn(b, "cpu"), "/"+parent+"."+id; got != want {
			t.Errorf("%s: the guest daemon's cpu group is %q, want the top-level group %q (one shared with no other sandbox)", id, got, want)
		}
		if got, want := cgroupIn(b, "pids"), "/"+parent+"/"+id; got != want {
			t.Errorf("%s: the guest daemon's pids group is %q, want %q", id, got, want)
		}
		shares, err := os.ReadFile(filepath.Join(d.hier.V1["cpu"], parent+"."+id, "cpu.shares"))
		if err != nil || strings.TrimSpace(string(shares)) != "2048" {
			t.Errorf("%s: cpu.shares = %q, %v; want 2048 for 2 CPUs", id, shares, err)
		}
		st, err := d.loadState(id)
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, st)
	}
	for _, st := range states {
		if err := d.Cleanup(context.Background(), st.ExecID); err != nil {
			t.Fatalf("Cleanup %s: %v", st.ExecID, err)
		}
		assertClean(t, d, st)
		if top := filepath.Join(d.hier.V1["cpu"], st.CgroupParent+"."+st.ExecID); fileExists(top) {
			t.Errorf("%s: cpu group %s left behind", st.ExecID, top)
		}
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
