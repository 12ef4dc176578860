package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestVMRuntime creates a sandbox that is a QEMU virtual machine with its own
// kernel and drives it through the same API as any other.
func TestVMRuntime(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
	}
	in := startServer(t, newDataDir(t))
	defer in.stop()
	var sb struct {
		sandbox
		Message string `json:"message"`
	}
	// The node offers vm once its kernel is fetched (a download on a new
	// machine); until then a create is refused with 503.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": "vm", "memory_mib": 256}, &sb)
		if code == http.StatusCreated {
			break
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("create vm sandbox: HTTP %d %s\n%s", code, sb.Message, in.logs())
		}
		time.Sleep(time.Second)
	}
	deleted := false
	defer func() {
		if !deleted {
			in.delete(sb.ID)
		}
	}()
	if sb.Runtime != "vm" || sb.State != "running" {
		t.Fatalf("sandbox = %+v", sb.sandbox)
	}
	var host unix.Utsname
	unix.Uname(&host)
	hostRelease := unix.ByteSliceToString(host.Release[:])
	res := in.exec(sb.ID, "uname", "-r")
	if got := strings.TrimSpace(res.Stdout); got == "" || got == hostRelease {
		t.Errorf("guest kernel %q, host kernel %q: want the guest's own", got, hostRelease)
	}
	// QEMU runs in a cgroup of its own, where the host inventory of the
	// server's directory (the crash tests' leak check) looks for it.
	if groups := vmmGroups(in.dataDir); len(groups) == 0 {
		t.Errorf("the inventory of %s lists no VMM group of the running vm sandbox %s", in.dataDir, sb.ID)
	}
	if res := in.exec(sb.ID, "hostname"); strings.TrimSpace(res.Stdout) != sb.ID {
		t.Errorf("hostname = %q, want %s", res.Stdout, sb.ID)
	}
	if _, e, c := in.cli("in the vm", "files", "write", sb.ID, "/home/user/vm.txt"); c != 0 {
		t.Fatalf("files write: %s", e)
	}
	if out, e, c := in.cli("", "files", "read", sb.ID, "/home/user/vm.txt"); c != 0 || out != "in the vm" {
		t.Errorf("files read: %q %s", out, e)
	}
	// Host processes are not visible: the guest has its own pid space.
	if res := in.exec(sb.ID, "sh", "-c", "test -e /proc/1/cmdline && cat /proc/1/cmdline | tr '\\0' ' '"); !strings.Contains(res.Stdout, "space-guest") {
		t.Errorf("guest pid 1 = %q, want the guest daemon", res.Stdout)
	}

	// A guest flooding its serial console: the host keeps a capped log (one
	// file and one rotation of ConsoleLogBytes) and the guest keeps
	// answering.
	var flood execResult
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"sh", "-c", "(head -c 6000000 /dev/urandom > /dev/console) >/dev/null 2>&1 &"}, "user": "root"}, &flood); code != 200 || flood.ExitCode != 0 {
		t.Fatalf("console flood: HTTP %d %+v", code, flood)
	}
	time.Sleep(4 * time.Second)
	logs, _ := filepath.Glob(filepath.Join(in.dataDir, "volumes", "vm", "exec", sb.ID+"-*", "console.log*"))
	var consoleBytes int64
	for _, l := range logs {
		if fi, err := os.Stat(l); err == nil {
			consoleBytes += fi.Size()
		}
	}
	t.Logf("console logs during the flood: %d bytes in %d files", consoleBytes, len(logs))
	if len(logs) == 0 || consoleBytes < 100<<10 || consoleBytes > 2<<20+64<<10 {
		t.Errorf("console logs %v hold %d bytes during a flood, want the flood logged in at most two capped files (rotation: TestCappedLog)", logs, consoleBytes)
	}
	if res := in.exec(sb.ID, "echo", "still here"); res.Stdout != "still here\n" {
		t.Errorf("guest during a console flood: %+v", res)
	}

	// A fork bomb inside the VM is capped by the guest's own pids limit, and
	// the guest daemon (outside that limit) keeps answering: the file reads
	// below need no new process.
	in.exec(sb.ID, "sh", "-c", "b(){ while :; do b & done; }; b >/dev/null 2>&1 </dev/null &")
	time.Sleep(3 * time.Second)
	readInt := func(path string) int {
		out, e, c := in.cli("", "files", "read", sb.ID, path)
		var n int
		if _, err := fmt.Sscan(out, &n); c != 0 || err != nil {
			t.Fatalf("read %s during a fork bomb: exit %d %q %s", path, c, out, e)
		}
		return n
	}
	max, cur := readInt("/sys/fs/cgroup/space-workload/pids.max"), readInt("/sys/fs/cgroup/space-workload/pids.current")
	if max == 0 || cur > max || cur < max/2 {
		t.Errorf("workload pids during a fork bomb: %d of max %d; want the bomb held at the cap", cur, max)
	}

	// QEMU dying is noticed, the sandbox fails with a reason, and delete
	// releases what is left.
	qemu := sandboxPid(t, in.dataDir, sb.ID)
	if err := unix.Kill(qemu, unix.SIGKILL); err != nil {
		t.Fatalf("kill QEMU %d: %v", qemu, err)
	}
	var got sandbox
	deadline = time.Now().Add(30 * time.Second)
	for got.State != "failed" && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
	}
	if got.State != "failed" || got.Reason == "" {
		t.Errorf("after QEMU died: %+v, want failed with a reason", got)
	}
	in.delete(sb.ID)
	deleted = true
	// Delete removes the VMM's cgroup (the failed QEMU's included).
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		groups := vmmGroups(in.dataDir)
		if len(groups) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after delete, VMM groups left: %v", groups)
			break
		}
	}
}
