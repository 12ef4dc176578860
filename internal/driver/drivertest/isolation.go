package drivertest

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
)

// testIsolation runs two executions side by side and checks what each can
// see of the host and of the other.
func testIsolation(t *testing.T, s *suite) {
	a := s.start(t, options{})
	b := s.start(t, options{})
	t.Run("Kernel", func(t *testing.T) { testKernel(t, a, s.ownKernel) })
	t.Run("HostProcesses", func(t *testing.T) { testHostProcesses(t, a, s.ownKernel) })
	t.Run("HostFiles", func(t *testing.T) { testHostFiles(t, a) })
	t.Run("OtherExecution", func(t *testing.T) { testOtherExecution(t, a, b) })
	t.Run("NetworkOnlyLoopback", func(t *testing.T) { testNetworkOnlyLoopback(t, a) })
}

// cmdlines returns the command lines of every process the sandbox's /proc
// shows, one per line.
func (sb *sandbox) cmdlines(t *testing.T) string {
	t.Helper()
	return sb.sh(t, `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done`)
}

// testKernel: Features.SharesHostKernel tells the truth. The kernel's count
// of context switches since boot (/proc/stat's ctxt) is the host's exactly
// when the sandbox runs on the host's kernel: read on the host before and
// after the sandbox reads it, it falls between the two; a kernel of its own
// counts its own switches, millions fewer than a host that has run for a
// while. (The boot id and the boot time would say so too, but the ns runtime
// gives each execution its own boot id and, in a time namespace, its own
// boot time, so that sandboxes cannot compare theirs.)
func testKernel(t *testing.T, sb *sandbox, ownKernel bool) {
	before, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Skipf("skipping: the host has no /proc/stat: %v", err)
	}
	got, _, err := sb.readFile(callCtx(t), "/proc/stat")
	if err != nil {
		t.Fatalf("read /proc/stat in the sandbox: %v", err)
	}
	after, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	hb, gc, ha := statField(before, "ctxt"), statField(got, "ctxt"), statField(after, "ctxt")
	if hb == 0 || gc == 0 || ha == 0 {
		t.Fatalf("no ctxt in /proc/stat: host %d then %d, sandbox %d (%q)", hb, ha, gc, got)
	}
	same := hb <= gc && gc <= ha
	if same == ownKernel {
		t.Errorf("the sandbox's kernel counts %d context switches, the host's %d before and %d after: same kernel is %v, but Features().SharesHostKernel is %v", gc, hb, ha, same, !ownKernel)
	}
}

// statField returns the value of a one-number line of /proc/stat (btime,
// ctxt, processes), 0 if none.
func statField(stat []byte, name string) int64 {
	for _, line := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func testHostProcesses(t *testing.T, sb *sandbox, ownKernel bool) {
	ctx := callCtx(t)
	comm, _, err := sb.readFile(ctx, "/proc/1/comm")
	if err != nil || strings.TrimSpace(string(comm)) != "space-guest" {
		t.Errorf("the sandbox's PID 1 is %q (%v), want space-guest", comm, err)
	}
	// A kernel of the sandbox's own also lists its kernel threads, which
	// have no command line: count the processes that have one.
	list := "ls /proc"
	if ownKernel {
		list = `for p in /proc/[0-9]*; do [ -e $p/exe ] && echo ${p#/proc/}; done; true`
	}
	n := 0
	for _, f := range strings.Fields(sb.sh(t, list)) {
		if _, err := strconv.Atoi(f); err == nil {
			n++
		}
	}
	if n == 0 || n > 10 {
		t.Errorf("the sandbox's /proc shows %d processes, want its own few", n)
	}
	host := filepath.Base(os.Args[0])
	if out := sb.cmdlines(t); strings.Contains(out, host) || !strings.Contains(out, "space-guest") {
		t.Errorf("process command lines seen in the sandbox:\n%s\nwant space-guest and not the host's %s", out, host)
	}
}

func testHostFiles(t *testing.T, sb *sandbox) {
	ctx := callCtx(t)
	marker := filepath.Join(t.TempDir(), "host-marker")
	if err := os.WriteFile(marker, []byte("host only"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, code, _ := sb.readFile(ctx, marker); code != http.StatusNotFound {
		t.Errorf("GET /files %s (a host file): status %d, body %q; want 404", marker, code, got)
	}
	res := sb.run(t, "", "cat", marker)
	if exitCode(res) == 0 || strings.Contains(res.stdout.String(), "host only") {
		t.Errorf("cat %s (a host file) in the sandbox: %v, want it not found", marker, res)
	}
	// The rootfs the sandbox runs on (a directory or a disk image) is not
	// reachable by its host path.
	if sb.spec.RootFS != "/" {
		if _, code, _ := sb.readFile(ctx, filepath.Join(sb.spec.RootFS, "etc/passwd")); code != http.StatusNotFound {
			t.Errorf("GET /files of the rootfs's host path: status %d, want 404", code)
		}
		if _, code, _ := sb.readFile(ctx, sb.spec.RootFS); code != http.StatusNotFound {
			t.Errorf("GET /files %s (the rootfs's host path): status %d, want 404", sb.spec.RootFS, code)
		}
	}
}

// testOtherExecution: a process and a file of b are invisible from a, while
// b itself sees both (so the check can fail).
func testOtherExecution(t *testing.T, a, b *sandbox) {
	ctx := callCtx(t)
	marker := "sleep 98765" + strconv.Itoa(os.Getpid()%1000)
	argv := strings.Fields(marker)
	st, err := b.startProcess(ctx, &processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: argv[0], Args: argv[1:]}}, "")
	if err != nil {
		t.Fatalf("start %s in b: %v", marker, err)
	}
	defer func() {
		sel := &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Pid{Pid: st.res.pid}}
		if _, err := b.client.Process().SendSignal(ctx, connect.NewRequest(&processv1.SendSignalRequest{Process: sel, Signal: processv1.Signal_SIGNAL_SIGKILL})); err != nil {
			t.Errorf("SIGKILL %s in b: %v", marker, err)
		}
		if res, err := st.wait(); err != nil || !killedBySignal(res, "killed") {
			t.Errorf("%s in b after SIGKILL: %v, %v", marker, res, err)
		}
	}()
	if !strings.Contains(b.cmdlines(t), marker) {
		t.Fatalf("b does not see its own %q", marker)
	}
	if out := a.cmdlines(t); strings.Contains(out, marker) {
		t.Errorf("a sees b's process %q:\n%s", marker, out)
	}

	name := "/tmp/only-in-" + b.spec.ExecID
	if err := b.putFile(ctx, name, strings.NewReader("b's")); err != nil {
		t.Fatal(err)
	}
	if got, _, err := b.readFile(ctx, name); err != nil || string(got) != "b's" {
		t.Fatalf("b reads its own %s: %q, %v", name, got, err)
	}
	if got, code, _ := a.readFile(ctx, name); code != http.StatusNotFound {
		t.Errorf("a reads b's %s: status %d, %q; want 404", name, code, got)
	}
	if _, code, _ := a.readFile(ctx, filepath.Join(b.spec.RootFS, name)); code != http.StatusNotFound {
		t.Errorf("a reads b's file by b's rootfs host path: status %d, want 404", code)
	}
}

// testNetworkOnlyLoopback: the execution's network namespace has lo only.
func testNetworkOnlyLoopback(t *testing.T, sb *sandbox) {
	dev, _, err := sb.readFile(callCtx(t), "/proc/net/dev")
	if err != nil {
		t.Fatalf("read /proc/net/dev: %v", err)
	}
	var ifaces []string
	for _, line := range strings.Split(string(dev), "\n") {
		name, _, ok := strings.Cut(line, ":")
		if ok && !strings.Contains(name, "|") {
			ifaces = append(ifaces, strings.TrimSpace(name))
		}
	}
	if len(ifaces) != 1 || ifaces[0] != "lo" {
		t.Errorf("network interfaces in the sandbox: %v, want only lo", ifaces)
	}
}
