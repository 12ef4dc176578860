package drivertest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
)

// The limit checks for a sandbox with its own kernel (a VM). Its memory cap
// is the VM's RAM less the guest daemon's reserve, enforced by the guest
// kernel on the workload's cgroup (which OOM-kills a hog), not by a host
// cgroup; its processes are the guest kernel's, so a fork bomb is the
// guest's problem: it must neither kill the guest daemon nor reach the host,
// where the VM stays one VMM process, and the daemon stays outside the
// workload's cgroup and its caps.

// memHog is an awk program that allocates and touches mib MiB, one MiB at a
// time, then prints "allocated". Growing step by step, it is not refused up
// front by the guest's overcommit heuristic (as one huge allocation would
// be): the guest kernel has to back it, and kills it when it cannot. Each
// MiB is a copy of one string built by doubling (a memcpy), not a fresh
// sprintf padding (a byte loop): under TCG the padding made the hog take
// tens of seconds on a loaded host.
func memHog(mib int) string {
	return fmt.Sprintf(`BEGIN { s = "x"; while (length(s) < 1048576) s = s s; for (i = 0; i < %d; i++) a[i] = s i; print "allocated" }`, mib)
}

// hogTimeout bounds a memory hog's run: the guest kernel has to zero and
// back every page it touches before it kills it, which under TCG on a busy
// host takes far longer than a call.
const hogTimeout = 3 * time.Minute

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
	// The workload's own cap, below the RAM: the daemon's reserve.
	const workloadEvents = "/sys/fs/cgroup/space-workload/memory.events"
	groupOOMs := guestField(t, sb, workloadEvents, "oom_kill")

	res := sb.runFor(t, hogTimeout, "", "awk", memHog(4*ramMiB))
	if !killedBySignal(res, "killed") || strings.Contains(res.stdout.String(), "allocated") {
		t.Errorf("touching %d MiB in a %d MiB VM: %v, want killed by SIGKILL", 4*ramMiB, ramMiB, res)
	}
	if after := guestField(t, sb, "/proc/vmstat", "oom_kill"); after <= ooms {
		t.Errorf("the guest kernel's oom_kill count went from %d to %d, want it to have killed the hog", ooms, after)
	}
	if after := guestField(t, sb, workloadEvents, "oom_kill"); after <= groupOOMs {
		t.Errorf("the workload group's oom_kill count went from %d to %d, want the hog killed at the workload's cap, not by the global OOM killer", groupOOMs, after)
	}
	if alive, err := sb.d.Alive(ctx, sb.spec.ExecID); !alive || err != nil {
		t.Fatalf("the VM died of a guest process's OOM: Alive = %v, %v", alive, err)
	}
	if got := sb.sh(t, "echo alive"); got != "alive\n" {
		t.Errorf("after the OOM kill the guest runs echo with output %q", got)
	}
	if res := sb.runFor(t, hogTimeout, "", "awk", memHog(16)); exitCode(res) != 0 || res.stdout.String() != "allocated\n" {
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

// vmBombPids is the task cap the test gives the guest's workload through
// Init, as the node does for every VM (node.guestPidsMax): the host's pids
// cap does not reach inside a VM.
const vmBombPids = 256

// vmBombWatch is how long testVMForkBomb watches the bomb at its cap.
const vmBombWatch = 10 * time.Second

// testVMForkBomb: an endless fork bomb inside the VM, its workload capped by
// Init's PidsMax, fills the cap and stays there; all the while the VM is
// alive, the host sees its VMM as one process with no children and can fork,
// and the guest daemon (outside the workload's group, with the CPU weight
// the workload lacks) answers every call on the same channel.
func testVMForkBomb(t *testing.T, s *suite) {
	sb := s.start(t, options{cpus: 1})
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	resp, err := sb.client.Control().Init(ctx, connect.NewRequest(&controlv1.InitRequest{SandboxId: sb.spec.SandboxID, Generation: 1, ActivationId: "act-bomb", PidsMax: vmBombPids}))
	if err != nil || !resp.Msg.GetPidsLimited() {
		t.Fatalf("Init with PidsMax %d: %v (%v); want the workload's pids capped", vmBombPids, resp, err)
	}
	if res := sb.run(t, "", "/bin/sh", "-c", forkBomb); exitCode(res) != 0 {
		t.Fatalf("starting the fork bomb: %v", res)
	}
	checkHost := func() {
		t.Helper()
		if alive, err := sb.d.Alive(ctx, sb.spec.ExecID); !alive || err != nil {
			t.Fatalf("the VM died during the fork bomb (Alive = %v, %v): a guest process must not be able to kill its VM", alive, err)
		}
		if kids := descendants(sb.inst.Pid); len(kids) != 0 {
			t.Fatalf("during the fork bomb the VMM %d has host child processes %v, want none", sb.inst.Pid, kids)
		}
		if _, err := sb.d.Stats(ctx, sb.spec.ExecID); err != nil {
			t.Fatalf("Stats during the fork bomb: %v", err)
		}
	}
	// Every call below is answered by the daemon without a new process.
	current := func() int {
		t.Helper()
		b, _, err := sb.readFile(ctx, "/sys/fs/cgroup/space-workload/pids.current")
		if err != nil {
			t.Fatalf("the guest daemon does not answer during the fork bomb: %v", err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("the workload's pids.current: %q", b)
		}
		return n
	}
	// Under emulation on a busy host the bomb forks slowly: wait while it
	// grows, and give up only when it stops short of the cap.
	for best, grew := 0, time.Now(); ; time.Sleep(50 * time.Millisecond) {
		checkHost()
		n := current()
		if n >= vmBombPids*9/10 {
			break
		}
		if n > best {
			best, grew = n, time.Now()
		}
		if time.Since(grew) > callTimeout {
			t.Fatalf("the fork bomb stopped at %d workload tasks for %v, short of the cap of %d", best, callTimeout, vmBombPids)
		}
	}
	calls, peak := 0, 0
	for end := time.Now().Add(vmBombWatch); time.Now().Before(end); calls++ {
		checkHost()
		peak = max(peak, current())
		if err := waitReady(sb.client); err != nil {
			t.Fatalf("the guest daemon's health check fails during the fork bomb: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if peak > vmBombPids {
		t.Errorf("the workload ran %d tasks, over its cap of %d", peak, vmBombPids)
	}
	if err := exec.Command("true").Run(); err != nil {
		t.Fatalf("the host cannot fork while the VM runs a fork bomb: %v", err)
	}
	t.Logf("fork bomb: held at %d of %d workload tasks for %v; the daemon answered %d rounds of calls", peak, vmBombPids, vmBombWatch, calls)
}
