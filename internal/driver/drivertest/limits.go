package drivertest

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testLimits checks that the memory and pids caps of the spec hold.
func testLimits(t *testing.T, s *suite) {
	t.Run("Memory", func(t *testing.T) {
		t.Parallel()
		if s.ownKernel {
			testVMMemory(t, s)
			return
		}
		testMemoryLimit(t, s)
	})
	t.Run("ForkBomb", func(t *testing.T) {
		t.Parallel()
		if s.ownKernel {
			testVMForkBomb(t, s)
			return
		}
		testForkBomb(t, s)
	})
}

// testMemoryLimit: dd with a 256 MiB block touches every page of its buffer
// (reading /dev/zero into it), four times the 64 MiB cap, so it is killed;
// the guest itself survives and keeps answering.
func testMemoryLimit(t *testing.T, s *suite) {
	const capMiB = 64
	sb := s.start(t, options{memoryMiB: capMiB})
	st, err := sb.d.Stats(callCtx(t), sb.spec.ExecID)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.MemoryLimitBytes != capMiB<<20 {
		t.Errorf("Stats.MemoryLimitBytes = %d, want %d", st.MemoryLimitBytes, capMiB<<20)
	}
	res := sb.run(t, "", "dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1")
	if !killedBySignal(res, "killed") {
		t.Errorf("allocating 256 MiB under a %d MiB cap: %v, want killed by SIGKILL", capMiB, res)
	}
	if s.h.WorkloadLimits != nil {
		testWorkloadMemory(t, s, sb, capMiB)
	}
	if got := sb.sh(t, "echo alive"); got != "alive\n" {
		t.Errorf("after the OOM kill the guest runs echo with output %q", got)
	}
	// Under the cap, the same allocation works.
	if res := sb.run(t, "", "dd", "if=/dev/zero", "of=/dev/null", "bs=16M", "count=1"); exitCode(res) != 0 {
		t.Errorf("allocating 16 MiB under a %d MiB cap: %v, want exit 0", capMiB, res)
	}
}

// forkBomb starts, in the background, shells that each fork copies of
// themselves forever. A shell whose fork fails (EAGAIN at pids max) says so
// on stderr, kept in bombLog, and exits; the others go on, so the bomb may
// shrink and grow again, or even die out, but the log proves it hit the cap.
const (
	bombLog  = "/tmp/fork-bomb.log"
	forkBomb = "b(){ while :; do b & done; }; b >/dev/null 2>>" + bombLog + " </dev/null &"
)

// testForkBomb: a fork bomb stays under pids max (measured from the host
// through Stats at every step) until it has hit the cap, the host can still
// fork, and the guest still serves. The execution's cleanup then has to kill
// every one of its processes.
func testForkBomb(t *testing.T, s *suite) {
	const pidsMax = 64
	sb := s.start(t, options{pidsMax: pidsMax, cpus: 1})
	var reserved int
	if s.h.WorkloadLimits != nil {
		_, workload := s.h.WorkloadLimits(0, pidsMax)
		reserved = pidsMax - workload
		inWorkloadGroup(t, sb)
	}
	res := sb.run(t, "", "/bin/sh", "-c", forkBomb)
	if exitCode(res) != 0 {
		t.Fatalf("starting the fork bomb: %v", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var peak uint64
	sample := func() {
		t.Helper()
		st, err := sb.d.Stats(ctx, sb.spec.ExecID)
		if err != nil {
			t.Fatalf("Stats during the fork bomb: %v", err)
		}
		peak = max(peak, st.Pids)
		if st.Pids > pidsMax {
			t.Fatalf("the fork bomb reached %d tasks, over pids max %d", st.Pids, pidsMax)
		}
	}
	for i := 0; ; i++ {
		sample()
		if alive, err := sb.d.Alive(ctx, sb.spec.ExecID); !alive || err != nil {
			t.Fatalf("the sandbox's init (the guest) died during the fork bomb (Alive = %v, %v; peak %d tasks): a process of the sandbox must not be able to kill its guest", alive, err, peak)
		}
		if i%10 == 9 {
			if log, _, err := sb.readFile(ctx, bombLog); err == nil && strings.Contains(string(log), "fork") {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the fork bomb never hit pids max %d (peak %d tasks, no fork failure in %s)", pidsMax, peak, bombLog)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("fork bomb: hit the cap; peak %d tasks seen under pids max %d", peak, pidsMax)
	if err := exec.Command("true").Run(); err != nil {
		t.Fatalf("the host cannot fork while the sandbox runs a fork bomb: %v", err)
	}
	// The guest still serves its host while the bomb holds the free pids.
	if alive, err := sb.d.Alive(ctx, sb.spec.ExecID); !alive || err != nil {
		t.Errorf("the sandbox's init (the guest) died during the fork bomb: Alive = %v, %v", alive, err)
	} else if err := waitReady(sb.client); err != nil {
		t.Errorf("the guest does not answer during the fork bomb: %v", err)
	}
	// The cap keeps holding while the bomb keeps trying.
	for range 10 {
		sample()
		time.Sleep(10 * time.Millisecond)
	}
	// With a reserve the bomb fills the workload's cap, never the sandbox's:
	// the daemon keeps the difference for its own threads.
	if reserved > 0 && peak >= pidsMax {
		t.Errorf("the fork bomb took all %d tasks of the sandbox; want %d kept for the guest daemon", pidsMax, reserved)
	}
}

// inWorkloadGroup checks that a process the daemon starts runs in the
// workload's child group in the memory and pids hierarchies (the sandbox's
// cgroup namespace is rooted at its own group) and in the sandbox's group in
// the others.
func inWorkloadGroup(t *testing.T, sb *sandbox) {
	t.Helper()
	got := sb.sh(t, "cat /proc/self/cgroup")
	want := map[string]string{"memory": "/workload", "pids": "/workload", "freezer": "/"}
	for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, ctrl := range strings.Split(f[1], ",") {
			if w, ok := want[ctrl]; ok {
				if f[2] != w {
					t.Errorf("a process of the sandbox is in %s:%s, want %s (/proc/self/cgroup:\n%s)", ctrl, f[2], w, got)
				}
				delete(want, ctrl)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("/proc/self/cgroup of a process of the sandbox has no line for %v:\n%s", want, got)
	}
}

// testWorkloadMemory: with the daemon's reserve, an allocation the
// sandbox's cap would hold but the workload's cannot is killed, one well
// under the workload's cap works, and the daemon answers after.
func testWorkloadMemory(t *testing.T, s *suite, sb *sandbox, capMiB int) {
	mem, _ := s.h.WorkloadLimits(int64(capMiB)<<20, 64)
	workloadMiB := int(mem >> 20)
	over := (workloadMiB + capMiB) / 2
	res := sb.run(t, "", "dd", "if=/dev/zero", "of=/dev/null", "bs="+strconv.Itoa(over)+"M", "count=1")
	if !killedBySignal(res, "killed") {
		t.Errorf("allocating %d MiB in a %d MiB sandbox whose workload may have %d MiB: %v, want killed by SIGKILL", over, capMiB, workloadMiB, res)
	}
	if got := sb.sh(t, "echo alive"); got != "alive\n" {
		t.Errorf("after the workload's OOM kill the guest runs echo with output %q", got)
	}
}
