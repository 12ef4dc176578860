package vm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/guest"
	"github.com/spacesandbox/space/internal/reexec"
	"github.com/spacesandbox/space/internal/testenv"
)

func TestPreBindSockets(t *testing.T) {
	st := &state{ExecID: "x", MemoryMiB: 256, CPUs: 1, Accel: AccelTCG, Kernel: "/k/vmlinuz", Initrd: "/k/initrd"}
	var bound []string
	listen := func(name string) (int, error) {
		bound = append(bound, name)
		return 10 + len(bound), nil
	}
	args, err := preBindSockets(qemuArgs(st), listen)
	if err != nil {
		t.Fatalf("preBindSockets(qemuArgs): %v", err)
	}
	slices.Sort(bound)
	if want := []string{channelSock, consoleSock, qmpSock}; !slices.Equal(bound, want) {
		t.Errorf("bound %q, want %q", bound, want)
	}
	joined := strings.Join(args, " ")
	for _, gone := range []string{"path=", "unix:"} {
		if strings.Contains(joined, gone) {
			t.Errorf("rewritten arguments still hold %q: %s", gone, joined)
		}
	}
	if slices.Contains(args, "-qmp") {
		t.Errorf("rewritten arguments still hold -qmp: %s", joined)
	}
	if !strings.Contains(joined, "-chardev socket,id="+channelChardev+",fd=") || !strings.Contains(joined, "-mon chardev=space-qmp,mode=control") {
		t.Errorf("rewritten arguments lack the channel's fd chardev or the QMP monitor: %s", joined)
	}
	if !slices.Contains(args, "-serial") || !slices.Contains(args, "chardev:con0") {
		t.Errorf("unrelated arguments were changed: %s", joined)
	}

	for _, tc := range []struct {
		name string
		args []string
		ok   bool
	}{
		{"stdio chardev passes", []string{"-chardev", "stdio,id=s"}, true},
		{"server socket", []string{"-chardev", "socket,id=a,path=a.sock,server=on,wait=off"}, true},
		{"legacy server flag", []string{"-chardev", "socket,id=a,path=a.sock,server,nowait"}, true},
		{"qmp", []string{"-qmp", "unix:q.sock,server=on,wait=off"}, true},
		{"absolute path", []string{"-chardev", "socket,id=a,path=/run/a.sock,server=on"}, false},
		{"dot-dot", []string{"-chardev", "socket,id=a,path=..,server=on"}, false},
		{"client socket", []string{"-chardev", "socket,id=a,path=a.sock,server=off"}, false},
		{"tcp socket", []string{"-chardev", "socket,id=a,host=127.0.0.1,port=4444,server=on"}, false},
		{"qmp over tcp", []string{"-qmp", "tcp:127.0.0.1:4444,server=on"}, false},
		{"qmp client", []string{"-qmp", "unix:q.sock"}, false},
		{"serial unix", []string{"-serial", "unix:s.sock,server=on"}, false},
		{"listen fails", []string{"-chardev", "socket,id=a,path=fail.sock,server=on"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := preBindSockets(tc.args, func(name string) (int, error) {
				if name == "fail.sock" {
					return 0, errors.New("bind refused")
				}
				return 7, nil
			})
			if (err == nil) != tc.ok {
				t.Errorf("preBindSockets(%q) error = %v, want ok=%v", tc.args, err, tc.ok)
			}
		})
	}
}

func TestJailPaths(t *testing.T) {
	st := &state{ExecID: "x", MemoryMiB: 256, CPUs: 1, Accel: AccelTCG, Kernel: "/cache/kernel/vmlinuz", Initrd: "/cache/initramfs/i.cpio"}
	files, devices := jailPaths(qemuArgs(st), st.Accel)
	for _, want := range []string{st.Kernel, st.Initrd} {
		if !slices.Contains(files, want) {
			t.Errorf("files %q lack %s", files, want)
		}
	}
	for _, f := range files {
		if !filepath.IsAbs(f) {
			t.Errorf("relative file %q in the jail's list (the execution's files are bound as its directory)", f)
		}
	}
	if !slices.Equal(devices, jailBaseDevices) {
		t.Errorf("TCG devices %q, want %q", devices, jailBaseDevices)
	}
	_, devices = jailPaths([]string{"-device", "vhost-vsock-pci,guest-cid=3", "-object", "rng-random,id=r,filename=/dev/hwrng"}, AccelKVM)
	for _, want := range []string{"/dev/kvm", "/dev/vhost-vsock", "/dev/hwrng"} {
		if !slices.Contains(devices, want) {
			t.Errorf("devices %q lack %s", devices, want)
		}
	}
}

func TestParseStatusIDs(t *testing.T) {
	good := "Name:\tqemu\\nUid:\t1\t2\t3\t4\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t900000000\t900000000\t900000000\t900000000\nGid:\t900000001\t5\t6\t7\nGroups:\t\n"
	ids, zombie, err := parseStatusIDs([]byte(good))
	if err != nil {
		t.Fatalf("parseStatusIDs: %v", err)
	}
	if want := []uint32{900000000, 900000000, 900000000, 900000000, 900000001, 5, 6, 7}; !slices.Equal(ids, want) || zombie {
		t.Errorf("ids %v, zombie %v; want %v, false", ids, zombie, want)
	}
	if _, zombie, err := parseStatusIDs([]byte(strings.Replace(good, "S (sleeping)", "Z (zombie)", 1))); !zombie || err != nil {
		t.Errorf("a zombie's status: zombie %v, %v; want true", zombie, err)
	}
	for _, bad := range []string{"", "Uid:\t1\t2\t3\t4\n", "Uid:\t1\t2\t3\nGid:\t1\t2\t3\t4\n", "Uid:\tx\t2\t3\t4\nGid:\t1\t2\t3\t4\n", "Uid:\t1\t2\t3\t99999999999\nGid:\t1\t2\t3\t4\n"} {
		if _, _, err := parseStatusIDs([]byte(bad)); err == nil {
			t.Errorf("parseStatusIDs(%q) accepted it", bad)
		}
	}
	self, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	ids, zombie, err = parseStatusIDs(self)
	if err != nil || zombie || len(ids) != 8 || ids[0] != uint32(os.Getuid()) || ids[4] != uint32(os.Getgid()) {
		t.Errorf("own status: ids %v, zombie %v, %v; want uid %d, gid %d first", ids, zombie, err, os.Getuid(), os.Getgid())
	}
}

func FuzzParseStatusIDs(f *testing.F) {
	f.Add([]byte("Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n"))
	f.Add([]byte("Name:\tx\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\nGroups:\t1 2\n"))
	f.Add([]byte("Uid:\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, _, err := parseStatusIDs(b)
		if err == nil && len(ids) != 8 {
			t.Fatalf("%d ids without an error", len(ids))
		}
	})
}

// TestJailHelperReportsErrors runs the jail helper (this test binary under
// the helper's argv[0]) with a specification it must refuse, and checks that
// it says why in the log and exits without running anything.
func TestJailHelperReportsErrors(t *testing.T) {
	dir := t.TempDir()
	spec := `{"root":"/nonexistent","dir":"` + dir + `","log":"qemu.log","qemu":"/bin/true","args":["-x"],"uid":0,"gid":0}`
	cmd := reexec.Command(JailHelper, spec)
	cmd.Dir = dir
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 126 {
		t.Errorf("helper exit: %v, want status 126", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "qemu.log"))
	if !strings.Contains(string(b), JailHelper+": jail for uid 0") {
		t.Errorf("helper log %q, want the refusal of uid 0", b)
	}
	broken := reexec.Command(JailHelper, "{not json")
	broken.Dir = dir
	if err := broken.Run(); err == nil {
		t.Error("the helper accepted a broken specification")
	}
}

func TestWorldReadable(t *testing.T) {
	dir := t.TempDir()
	for mode, ok := range map[os.FileMode]bool{0o644: true, 0o444: true, 0o640: false, 0o600: false} {
		p := filepath.Join(dir, mode.String())
		if err := os.WriteFile(p, nil, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		if err := worldReadable(p); (err == nil) != ok {
			t.Errorf("worldReadable(mode %v) = %v, want ok=%v", mode, err, ok)
		}
	}
	if err := worldReadable(dir); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("worldReadable(a directory) = %v, want FailedPrecondition", err)
	}
}

// TestAllocUID checks the uid claims: one per execution, the lowest free,
// never one a live process holds, released with the execution's directory.
func TestAllocUID(t *testing.T) {
	testenv.RequiresRoot(t)
	const base = 910_000_000
	d := &Driver{cfg: Config{StateDir: t.TempDir(), UIDBase: base, UIDs: 3}}
	for _, id := range []string{"a", "b", "c", "e"} {
		if err := os.MkdirAll(d.execDir(id), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	alloc := func(id string) uint32 {
		t.Helper()
		uid, err := d.allocUID(id)
		if err != nil {
			t.Fatalf("allocUID(%s): %v", id, err)
		}
		return uid
	}
	if a := alloc("a"); a != base {
		t.Errorf("first uid %d, want %d", a, base)
	}
	if a := alloc("a"); a != base {
		t.Errorf("second claim of a: uid %d, want its first %d", a, base)
	}
	if b := alloc("b"); b != base+1 {
		t.Errorf("b's uid %d, want %d", b, base+1)
	}
	// A live process holding the last uid of the range keeps it from c.
	sleeper := exec.Command("sleep", "600")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: base + 2, Gid: base + 2}}
	if err := sleeper.Start(); err != nil {
		t.Fatalf("start a process as uid %d: %v", base+2, err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	if uid, err := d.allocUID("c"); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("allocUID with every uid taken = %d, %v; want ResourceExhausted", uid, err)
	}
	if inUse, err := d.uidInUse(base + 2); !inUse || err != nil {
		t.Errorf("uidInUse(held by a process) = %v, %v; want true", inUse, err)
	}
	// Once that process is a zombie (killed, not reaped) the uid is free.
	sleeper.Process.Kill()
	for deadline := time.Now().Add(time.Minute); !strings.HasPrefix(statusField(t, sleeper.Process.Pid, "State"), "Z"); {
		if time.Now().After(deadline) {
			t.Fatal("the killed process never became a zombie")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if c := alloc("c"); c != base+2 {
		t.Errorf("c's uid %d, want %d (its holder is a zombie)", c, base+2)
	}
	// Removing a's directory (what Cleanup does) releases its uid.
	if err := os.RemoveAll(d.execDir("a")); err != nil {
		t.Fatal(err)
	}
	if inUse, err := d.uidInUse(base); inUse || err != nil {
		t.Errorf("uidInUse(a's after its directory is gone) = %v, %v; want false", inUse, err)
	}
	if e := alloc("e"); e != base {
		t.Errorf("e's uid %d, want a's released %d", e, base)
	}
	if b, err := os.ReadFile(claimPath(filepath.Join(d.cfg.StateDir, uidClaimsDir), base)); err != nil || string(b) != "e" {
		t.Errorf("claim of %d = %q, %v; want e", base, b, err)
	}

	for _, cfg := range []Config{{UIDBase: 100}, {UIDBase: 1<<32 - 10, UIDs: 100}, {UIDs: -1}} {
		bad := &Driver{cfg: cfg}
		bad.cfg.StateDir = d.cfg.StateDir
		if _, err := bad.allocUID("a"); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("allocUID with base %d, %d uids = %v; want InvalidArgument", cfg.UIDBase, cfg.UIDs, err)
		}
	}
}

func TestPrepareExecDir(t *testing.T) {
	testenv.RequiresRoot(t)
	dir := t.TempDir()
	for _, name := range []string{diskFile, guestConfig, stateFile} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const id = 910_100_000
	if err := prepareExecDir(dir, id, false); err != nil {
		t.Fatalf("prepareExecDir: %v", err)
	}
	for _, c := range []struct {
		name     string
		uid, gid uint32
		mode     os.FileMode
	}{
		{".", 0, id, 0o710},
		{diskFile, 0, id, 0o660},
		{guestConfig, 0, id, 0o640},
		{stateFile, 0, 0, 0o600},
	} {
		fi, err := os.Lstat(filepath.Join(dir, c.name))
		if err != nil {
			t.Fatal(err)
		}
		sys := fi.Sys().(*syscall.Stat_t)
		if sys.Uid != c.uid || sys.Gid != c.gid || fi.Mode().Perm() != c.mode {
			t.Errorf("%s: owner %d:%d mode %v; want %d:%d %v", c.name, sys.Uid, sys.Gid, fi.Mode().Perm(), c.uid, c.gid, c.mode)
		}
	}
	link := t.TempDir()
	os.Symlink("/etc/passwd", filepath.Join(link, diskFile))
	if err := prepareExecDir(link, id, false); err == nil {
		t.Error("prepareExecDir chowned through a symlink")
	}
}

// TestConfinement boots VMs with the jail and checks what their QEMU is and
// sees: its own uid, namespaces and mounts, nothing of the host or of the
// other VM, and that a restarted driver cleans up and releases the uid.
func TestConfinement(t *testing.T) {
	f := newFixture(t)
	stateDir := t.TempDir()
	const base = 920_000_000
	newDriver := func(dir string, unconfined bool) *Driver {
		d, err := New(Config{StateDir: dir, Kernel: f.kernel, CacheDir: f.cacheDir, Log: testLogger(t), ColdBoot: true,
			UIDBase: base, UIDs: 8, Unconfined: unconfined})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return d
	}
	d := newDriver(stateDir, false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := func(t *testing.T, d *Driver, id string) (*driver.Instance, *state) {
		t.Helper()
		inst, err := d.Start(ctx, driver.Spec{ExecID: id, SandboxID: "sbx-" + id, RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: 256, CPUs: 1})
		if err != nil {
			t.Fatalf("Start %s: %v", id, err)
		}
		t.Cleanup(func() {
			inst.Channel.Close()
			if err := d.Cleanup(context.Background(), id); err != nil {
				t.Errorf("Cleanup %s: %v", id, err)
			}
			d.Wait()
		})
		st, err := d.loadState(id)
		if err != nil {
			t.Fatal(err)
		}
		return inst, st
	}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}

	instA, stA := start(t, d, "conf-a")
	conn, err := net.FileConn(instA.Channel)
	if err != nil {
		t.Fatal(err)
	}
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Wait(ctx); err != nil {
		t.Fatalf("the confined VM's guest never answered: %v\nqemu.log: %s\nconsole: %s", err,
			tailFile(filepath.Join(d.execDir(stA.ExecID), qemuLog), 2048), tailFile(filepath.Join(d.execDir(stA.ExecID), consoleLog), 2048))
	}
	if out := shell(t, c, "echo confined"); strings.TrimSpace(out) != "confined" {
		t.Errorf("guest shell said %q", out)
	}
	t.Logf("qemu.log of the confined VM: %q", tailFile(filepath.Join(d.execDir(stA.ExecID), qemuLog), 2048))
	_, stB := start(t, d, "conf-b")

	if stA.UID != base || stB.UID != base+1 || stA.GID != stA.UID || stB.GID != stB.UID {
		t.Errorf("uids/gids %d/%d and %d/%d; want %d and %d, gid = uid", stA.UID, stA.GID, stB.UID, stB.GID, base, base+1)
	}
	for _, st := range []*state{stA, stB} {
		checkQEMUProcess(t, d, st)
		checkJail(t, d, st, []string{secret, d.execDir(other(st, stA, stB).ExecID), "/root", "/home", "/etc/passwd", "/proc/self", "/sys/kernel",
			filepath.Join(stateDir, uidClaimsDir), filepath.Join(stateDir, "jail")})
	}

	t.Run("RestartedDriverCleansUp", func(t *testing.T) {
		d2 := newDriver(stateDir, false)
		if err := d2.Cleanup(ctx, stA.ExecID); err != nil {
			t.Fatalf("Cleanup from a new driver: %v", err)
		}
		if driver.ProcAlive(stA.Pid, stA.StartTime) {
			t.Errorf("QEMU pid %d still runs after Cleanup", stA.Pid)
		}
		if inUse, err := d2.uidInUse(stA.UID); inUse || err != nil {
			t.Errorf("uid %d in use after Cleanup: %v, %v", stA.UID, inUse, err)
		}
		if inUse, _ := d2.uidInUse(stB.UID); !inUse {
			t.Errorf("uid %d of the running VM is not in use", stB.UID)
		}
		_, stC := start(t, d2, "conf-c")
		if stC.UID != stA.UID {
			t.Errorf("the next VM got uid %d, want the released %d", stC.UID, stA.UID)
		}
		for _, st := range []*state{stB, stC} {
			if err := d2.Cleanup(ctx, st.ExecID); err != nil {
				t.Fatalf("Cleanup %s: %v", st.ExecID, err)
			}
		}
		// A zombie keeps its ids until the driver that started it reaps it.
		d.Wait()
		d2.Wait()
		held, err := procIDs(base, 8)
		if err != nil || len(held) != 0 {
			t.Errorf("ids still held by processes after every Cleanup: %v, %v", held, err)
		}
	})
	t.Run("Unconfined", func(t *testing.T) {
		du := newDriver(t.TempDir(), true)
		_, st := start(t, du, "unconf")
		waitExec(t, du, st)
		if st.UID != 0 {
			t.Errorf("unconfined state records uid %d", st.UID)
		}
		if got := statusField(t, st.Pid, "Uid"); got != "0\t0\t0\t0" {
			t.Errorf("unconfined QEMU runs as uid %q, want root", got)
		}
	})
}

// waitExec waits until the jail helper of st has become QEMU and QEMU
// answers QMP: Start returns once the sockets the helper binds accept
// connections, which may be before it execs QEMU.
func waitExec(t *testing.T, d *Driver, st *state) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		exe, err := os.Readlink("/proc/" + strconv.Itoa(st.Pid) + "/exe")
		if err == nil && strings.Contains(filepath.Base(exe), "qemu-system") {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := d.qmpExecute(ctx, st, "query-status"); err != nil {
				t.Fatalf("exec %s: QMP: %v", st.ExecID, err)
			}
			return
		}
		if time.Now().After(deadline) || !driver.ProcAlive(st.Pid, st.StartTime) {
			t.Fatalf("exec %s: pid %d runs %q (%v), not QEMU", st.ExecID, st.Pid, exe, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func other(st, a, b *state) *state {
	if st == a {
		return b
	}
	return a
}

// checkQEMUProcess checks the credentials and namespaces of st's QEMU.
func checkQEMUProcess(t *testing.T, d *Driver, st *state) {
	t.Helper()
	waitExec(t, d, st)
	ids := fmt.Sprintf("%d\t%d\t%d\t%d", st.UID, st.UID, st.UID, st.UID)
	for field, want := range map[string]string{
		"Uid": ids, "Gid": fmt.Sprintf("%d\t%d\t%d\t%d", st.GID, st.GID, st.GID, st.GID),
		"Groups": "", "CapEff": "0000000000000000", "CapPrm": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
	} {
		if got := statusField(t, st.Pid, field); got != want {
			t.Errorf("exec %s: QEMU %s = %q, want %q", st.ExecID, field, got, want)
		}
	}
	limits, err := os.ReadFile("/proc/" + strconv.Itoa(st.Pid) + "/limits")
	if err != nil {
		t.Errorf("exec %s: QEMU's limits: %v", st.ExecID, err)
	}
	nofile := regexp.MustCompile(`Max open files\s+(\d+)\s+(\d+)`).FindStringSubmatch(string(limits))
	if want := strconv.Itoa(QEMUMaxFiles); nofile == nil || nofile[1] != want || nofile[2] != want {
		t.Errorf("exec %s: QEMU's open-file limit %q, want %s soft and hard", st.ExecID, nofile, want)
	}
	for _, ns := range []string{"mnt", "net", "ipc", "uts"} {
		mine, err1 := os.Readlink("/proc/self/ns/" + ns)
		its, err2 := os.Readlink("/proc/" + strconv.Itoa(st.Pid) + "/ns/" + ns)
		if err1 != nil || err2 != nil || mine == its {
			t.Errorf("exec %s: QEMU's %s namespace %q, the host's %q (%v, %v); want its own", st.ExecID, ns, its, mine, err1, err2)
		}
	}
}

// checkJail checks what st's QEMU sees through /proc/<pid>/root: its files,
// read-only but for the disk, and none of hidden.
func checkJail(t *testing.T, d *Driver, st *state, hidden []string) {
	t.Helper()
	root := "/proc/" + strconv.Itoa(st.Pid) + "/root"
	dir := d.execDir(st.ExecID)
	for _, p := range []string{filepath.Join(dir, diskFile), filepath.Join(dir, guestConfig), filepath.Join(dir, channelSock), st.Kernel, st.Initrd, d.cfg.QEMU, "/dev/urandom", "/dev/null"} {
		if _, err := os.Stat(root + p); err != nil {
			t.Errorf("exec %s: QEMU cannot see %s: %v", st.ExecID, p, err)
		}
	}
	for _, p := range hidden {
		if _, err := os.Lstat(root + p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("exec %s: QEMU sees %s (%v)", st.ExecID, p, err)
		}
	}
	entries, err := os.ReadDir(root + filepath.Dir(dir))
	if err != nil || len(entries) != 1 || entries[0].Name() != st.ExecID {
		t.Errorf("exec %s: QEMU's view of the executions: %v, %v; want only its own", st.ExecID, entries, err)
	}
	// Every mount of the jail, with whether it is writable: only the disk is.
	want := map[string]bool{"/": false, "/usr": false, dir: false, filepath.Join(dir, diskFile): true, st.Kernel: false, st.Initrd: false}
	for _, p := range jailBaseDevices {
		want[p] = false
	}
	if _, err := os.Stat("/etc/ld.so.cache"); err == nil {
		want["/etc/ld.so.cache"] = false
	}
	for _, p := range jailSystemPaths {
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			want[p] = false
		}
	}
	got := jailMounts(t, st.Pid)
	for p, rw := range got {
		w, ok := want[p]
		switch {
		case !ok:
			t.Errorf("exec %s: unexpected mount %s in the jail", st.ExecID, p)
		case w != rw:
			t.Errorf("exec %s: mount %s writable=%v, want %v", st.ExecID, p, rw, w)
		}
	}
	for p := range want {
		if _, ok := got[p]; !ok {
			t.Errorf("exec %s: no mount %s in the jail", st.ExecID, p)
		}
	}
	for name, want := range map[string]string{diskFile: "660", guestConfig: "640", stateFile: "600", ".": "710"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || strconv.FormatUint(uint64(fi.Mode().Perm()), 8) != want {
			t.Errorf("exec %s: %s mode %v (%v), want %s", st.ExecID, name, fi.Mode(), err, want)
		}
	}
}

// jailMounts reads pid's mount table: mount point and whether it is writable.
func jailMounts(t *testing.T, pid int) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	mounts := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			t.Fatalf("mountinfo line %q", sc.Text())
		}
		mounts[f[4]] = slices.Contains(strings.Split(f[5], ","), "rw")
	}
	return mounts
}

func statusField(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("QEMU pid %d: %v", pid, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("QEMU pid %d: no %s in status", pid, field)
	return ""
}

// BenchmarkQEMUStart measures Start until QEMU answers on QMP, with the jail
// and without, so the jail's cost shows (run with -benchtime=5x: each
// iteration starts a VM).
func BenchmarkQEMUStart(b *testing.B) {
	f := newFixture(b)
	for _, unconfined := range []bool{false, true} {
		name := "confined"
		if unconfined {
			name = "unconfined"
		}
		b.Run(name, func(b *testing.B) {
			d, err := New(Config{StateDir: b.TempDir(), Kernel: f.kernel, CacheDir: f.cacheDir, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
				ColdBoot: true, Unconfined: unconfined, UIDBase: 930_000_000, UIDs: 16})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				id := "qs-" + strconv.Itoa(i)
				inst, err := d.Start(ctx, driver.Spec{ExecID: id, SandboxID: "bench", RootFS: f.image, GuestBinary: f.guestBin, MemoryMiB: 256})
				if err != nil {
					b.Fatal(err)
				}
				inst.Channel.Close()
				st, err := d.loadState(id)
				if err != nil {
					b.Fatal(err)
				}
				if err := d.qmpExecute(ctx, st, "query-status"); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := d.Cleanup(ctx, id); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			d.Wait()
		})
	}
}
