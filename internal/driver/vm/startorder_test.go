package vm

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/vmimage"
)

// fakeQEMUName is argv[0] under which this test binary plays QEMU: see
// TestStartWaitsForQMP.
const fakeQEMUName = "fake-qemu-system-x86_64"

// fakeQMPDelay is how long the fake QEMU waits between binding its
// chardev sockets and binding its QMP socket.
const fakeQMPDelay = 1500 * time.Millisecond

// fakeInitDelay is how long the fake QEMU, its QMP socket bound, takes to
// "build the machine": then it opens its disk and fw_cfg files (exiting
// when they are not there, as QEMU does) and only then greets on QMP.
const fakeInitDelay = 500 * time.Millisecond

func init() {
	if filepath.Base(os.Args[0]) == fakeQEMUName {
		runFakeQEMU(os.Args[1:])
		os.Exit(0)
	}
}

// runFakeQEMU binds the chardev sockets QEMU's arguments name, in their
// order, then — as a real QEMU does, only slower — the QMP socket; then it
// opens the files of -drive and -fw_cfg (relative to its working
// directory, as QEMU does at machine creation) and answers QMP until
// "quit". Connections to the chardevs are held open.
func runFakeQEMU(args []string) {
	var chardevs, files []string
	var qmp string
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "-drive", "-fw_cfg":
			for _, kv := range strings.Split(args[i+1], ",") {
				if p, ok := strings.CutPrefix(kv, "file="); ok {
					files = append(files, p)
				}
			}
		case "-chardev":
			for _, kv := range strings.Split(args[i+1], ",") {
				if p, ok := strings.CutPrefix(kv, "path="); ok {
					chardevs = append(chardevs, p)
				}
			}
		case "-qmp":
			qmp, _, _ = strings.Cut(strings.TrimPrefix(args[i+1], "unix:"), ",")
		}
	}
	for _, p := range chardevs {
		l, err := net.Listen("unix", p)
		if err != nil {
			os.Exit(1)
		}
		go func() {
			var held []net.Conn
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				held = append(held, c)
			}
		}()
	}
	time.Sleep(fakeQMPDelay)
	l, err := net.Listen("unix", qmp)
	if err != nil {
		os.Exit(1)
	}
	time.Sleep(fakeInitDelay)
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			os.Exit(1)
		}
		defer f.Close()
	}
	for {
		c, err := l.Accept()
		if err != nil {
			os.Exit(1)
		}
		c.Write([]byte(`{"QMP": {"version": {}, "capabilities": []}}` + "\n"))
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			c.Write([]byte(`{"return": {}}` + "\n"))
			if strings.Contains(sc.Text(), `"quit"`) {
				os.Exit(0)
			}
		}
		c.Close()
	}
}

// TestStartWaitsForQMP: Start of an unconfined VM returns only once QMP
// answers, even when QEMU binds its QMP socket well after the console and
// the guest channel (as QEMU does, by microseconds; TestConfinement/
// Unconfined once found no QMP socket right after Start under load). The
// fake QEMU here takes fakeQMPDelay between them; without the wait in
// Start, the QMP command right after it fails.
func TestStartWaitsForQMP(t *testing.T) {
	d, spec := fakeQEMUDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec.ExecID, spec.SandboxID = "qmp-order", "sbx-qmp-order"
	inst, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() {
		inst.Channel.Close()
		if err := d.Cleanup(context.Background(), "qmp-order"); err != nil {
			t.Errorf("Cleanup: %v", err)
		}
		d.Wait()
	}()
	st, err := d.loadState("qmp-order")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.qmpExecute(ctx, st, "query-status"); err != nil {
		t.Errorf("a QMP command right after Start: %v", err)
	}
}

// TestStartWaitsForQEMUInit: Start returns only once QEMU has finished
// starting — greeted on QMP, its disk and fw_cfg files open — not once its
// QMP socket listens. QEMU binds its sockets before it builds the machine
// and opens those files (relative to the execution directory), so a
// directory removed right after a Start that returned early made QEMU exit
// on its own instead of running until StopRemoved stopped it
// (TestStopRemoved/Unconfined under load: "StopRemoved = []; QEMU alive
// false"). The fake QEMU here takes fakeInitDelay between binding QMP and
// opening its files; without the greeting wait in Start it finds them
// removed and exits.
func TestStartWaitsForQEMUInit(t *testing.T) {
	d, spec := fakeQEMUDriver(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const id = "init-order"
	spec.ExecID, spec.SandboxID = id, "sbx-init-order"
	inst, err := d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	inst.Channel.Close()
	defer d.Wait()
	defer killProc(inst.Pid, inst.StartTime)
	if err := os.RemoveAll(d.execDir(id)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(fakeInitDelay + time.Second)
	if !driver.ProcAlive(inst.Pid, inst.StartTime) {
		t.Error("QEMU exited when its directory was removed right after Start: Start returned before QEMU opened its files")
	}
}

// fakeQEMUDriver is an unconfined driver whose QEMU is this test binary
// playing fakeQEMUName, and the spec of a VM for it (ids to fill in).
func fakeQEMUDriver(t *testing.T) (*Driver, driver.Spec) {
	t.Helper()
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	qemu := filepath.Join(dir, fakeQEMUName)
	if err := os.Symlink(self, qemu); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, name := range []string{"vmlinuz", "space-guest", "root.img"} {
		files[name] = filepath.Join(dir, name)
		if err := os.WriteFile(files[name], []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, err := New(Config{
		StateDir: filepath.Join(dir, "state"), QEMU: qemu, Accel: AccelTCG, ColdBoot: true, Unconfined: true, Log: testLogger(t),
		Kernel: &vmimage.Kernel{Vmlinuz: files["vmlinuz"], SHA256: "fake", Minimal: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d, driver.Spec{RootFS: files["root.img"], GuestBinary: files["space-guest"], MemoryMiB: 256}
}
