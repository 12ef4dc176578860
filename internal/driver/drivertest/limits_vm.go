package drivertest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The limit checks for a sandbox with its own kernel (a VM). Its memory cap
// is the VM's RAM less the guest daemon's reserve, enforced by the guest
// kernel on the workload's cgroup (which OOM-kills a hog), not by a host
// cgroup; its processes are the guest kernel's, so a fork bomb is the
// guest's problem: it must neither kill the guest daemon nor reach the host,
// where the VM stays one VMM process.

// memHog is an awk program that allocates and touches mib MiB, one MiB at a
// time, then prints "allocated". Growing step by step, it is not refused up
// front by the guest's overcommit heuristic (as one huge allocation would
// be): the guest kernel has to back it, and kills it when it cannot.
func memHog(mib int) string {
	return fmt.Sprintf(`BEGIN { for (i = 0; i < %d; i++) a[i] = sprintf("%%1048576d", i); print "allocated" }`, mib)
}

// testVMMemory: the guest kernel sees the spec's RAM, a process that touches
// four times that much is OOM-killed by the guest kernel (its oom_kill
// counter moves), the guest daemon survives and serves, and an allocation
// well under the RAM works. Stats reports the VMM's memory and the RAM.
func testVMMemory(t *testing.T, s *suite) {
	const ramMiB = 128
	sb := s.start(t, options{memoryMiB: ramMiB})
	ctx := callCtx(t)
	st, err := sb.d.Stats(ctx, sb.spec.ExecID)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.MemoryLimitBytes != ramMiB<<20 || st.MemoryBytes == 0 {
		t.Errorf("Stats = %+v, want MemoryLimitBytes %d (the VM's RAM) and the VMM's memory", st, ramMiB<<20)
	}
	// The firmware and the kernel's own image keep some of the RAM.
	if total := guestField(t, sb, "/proc/meminfo", "MemTotal:"); total > ramMiB<<10 || total < ramMiB<<9 {
		t.Errorf("the guest's MemTotal is %d KiB, want the VM's %d MiB less the kernel's share", total, ramMiB)
	}
	ooms := guestField(t, sb, "/proc/vmstat", "oom_kill")

	res := sb.run(t, "", "awk", memHog(4*ramMiB))
	if !killedBySignal(res, "killed") || strings.Contains(res.stdout.String(), "allocated") {
		t.Errorf("touching %d MiB in a %d MiB VM: %v, want killed by SIGKILL", 4*ramMiB, ramMiB, res)
	}
	if after := guestField(t, sb, "/proc/vmstat", "oom_kill"); after <= ooms {
		t.Errorf("the guest kernel's oom_kill count went from %d to %d, want it to have killed the hog", ooms, after)
	}
	if alive, err := sb.d.Alive(ctx, sb.spec.ExecID); !alive || err != nil {
		t.Fatalf("the VM died of a guest process's OOM: Alive = %v, %v", alive, err)
	}
	if got := sb.sh(t, "echo alive"); got != "alive\n" {
		t.Errorf("after the OOM kill the guest runs echo with output %q", got)
	}
	if res := sb.run(t, "", "awk", memHog(16)); exitCode(res) != 0 || res.stdout.String() != "allocated\n" {
		t.Errorf("touching 16 MiB in a %d MiB VM: %v, want exit 0", ramMiB, res)
	}
	// The guest touched most of its RAM: the VMM holds it.
	if st, err := sb.d.Stats(ctx, sb.spec.ExecID); err != nil || st.MemoryBytes < ramMiB<<19 {
		t.Errorf("Stats after the guest touched its RAM = %+v, %v; want the VMM's memory to hold at least half of the %d MiB", st, err, ramMiB)
	}
}

// guestField reads a "name value" line of a /proc file of the guest (through
// the file API, which needs no new guest process).
func guestField(t *testing.T, sb *sandbox, path, name string) uint64 {
	t.Helper()
	b, _, err := sb.readFile(callCtx(t), path)
	if err != nil {
		t.Fatalf("read %s in the guest: %v", path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == name {
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatalf("%s in the guest's %s: %q", name, path, sc.Text())
			}
			return n
		}
	}
	t.Fatalf("no %s in the guest's %s", name, path)
	return 0
}

// guestTasks is the number of tasks the guest kernel runs, from the
// "running/total" field of its /proc/loadavg.
func guestTasks(ctx context.Context, sb *sandbox) (int, error) {
	b, _, err := sb.readFile(ctx, "/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0, fmt.Errorf("guest /proc/loadavg: %q", b)
	}
	_, total, ok := strings.Cut(f[3], "/")
	n, err := strconv.Atoi(total)
	if !ok || err != nil {
		return 0, fmt.Errorf("guest /proc/loadavg: %q", b)
	}
	return n, nil
}

// vmStormTasks is how many guest tasks the fork storm of testVMForkBomb
// grows to before it stops itself.
const vmStormTasks = 400

// forkStorm is forkBomb made to end: every shell forks copies of itself as
// fast as it can until the guest kernel runs vmStormTasks tasks (read from
// /proc/loadavg with shell builtins, no fork), then all of them exit. The vm
// runtime applies no pids cap inside the guest (Spec.PidsMax), and an
// endless bomb on one vCPU starves the guest daemon until the host declares
// its channel dead (45 s without an answer to a ping, measured under TCG):
// the storm bounds the test, not the guest.
var forkStorm = fmt.Sprintf(`b(){ while :; do read x y z rt rest < /proc/loadavg; if [ "${rt#*/}" -ge %d ]; then : > %s.stop; fi; [ -e %s.stop ] && exit; b & done; }; b >/dev/null 2>>%s </dev/null &`,
	vmStormTasks, bombLog, bombLog, bombLog)

// testVMForkBomb: a fork storm inside the VM grows to vmStormTasks guest
// tasks while, at every step, the VM stays alive and the host sees its VMM as
// one process with no children; the host can fork meanwhile; when the storm
// has ended, the guest daemon still serves on the same channel and starts
// processes.
func testVMForkBomb(t *testing.T, s *suite) {
	sb := s.start(t, options{cpus: 1})
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	base, err := guestTasks(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	if res := sb.run(t, "", "/bin/sh", "-c", forkStorm); exitCode(res) != 0 {
		t.Fatalf("starting the fork storm: %v", res)
	}
	checkHost := func() {
		t.Helper()
		if alive, err := sb.d.Alive(ctx, sb.spec.ExecID); !alive || err != nil {
			t.Fatalf("the VM died during the fork storm (Alive = %v, %v): a guest process must not be able to kill its VM", alive, err)
		}
		if kids := descendants(sb.inst.Pid); len(kids) != 0 {
			t.Fatalf("during the fork storm the VMM %d has host child processes %v, want none", sb.inst.Pid, kids)
		}
		if _, err := sb.d.Stats(ctx, sb.spec.ExecID); err != nil {
			t.Fatalf("Stats during the fork storm: %v", err)
		}
	}
	peak := 0
	for stopped := false; !stopped; {
		checkHost()
		n, err := guestTasks(ctx, sb)
		if err != nil {
			t.Fatalf("the guest does not answer during the fork storm (peak %d tasks): %v", peak, err)
		}
		peak = max(peak, n)
		_, code, _ := sb.readFile(ctx, bombLog+".stop")
		stopped = code == http.StatusOK
		if ctx.Err() != nil {
			t.Fatalf("the fork storm did not reach %d guest tasks (peak %d)", vmStormTasks, peak)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := exec.Command("true").Run(); err != nil {
		t.Fatalf("the host cannot fork while the VM runs a fork storm: %v", err)
	}
	waitFor(t, "the fork storm to end", func() bool {
		checkHost()
		n, err := guestTasks(ctx, sb)
		if err != nil {
			t.Fatalf("the guest does not answer after the fork storm: %v", err)
		}
		return n <= base+8
	})
	t.Logf("fork storm: %d guest tasks before, peak %d seen, stopped at %d", base, peak, vmStormTasks)
	if err := waitReady(sb.client); err != nil {
		t.Errorf("the guest does not answer after the fork storm: %v", err)
	}
	if got := sb.sh(t, "echo alive"); got != "alive\n" {
		t.Errorf("after the fork storm the guest runs echo with output %q", got)
	}
}
