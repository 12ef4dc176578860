package drivertest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
)

// counterLoop increments /tmp/counter every 10 ms.
const counterLoop = `i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; usleep 10000; done`

// testLifecycle covers Stats, Pause/Resume (when supported), Kill and the
// errors for unknown executions; the execution's cleanup checks Cleanup.
func testLifecycle(t *testing.T, s *suite) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if _, ok := s.d.(driver.Pauser); ok != s.d.Features().Pause {
		t.Errorf("Features().Pause = %v but implementing Pauser is %v", s.d.Features().Pause, ok)
	}
	for _, id := range []string{"ct-never-started"} {
		if err := s.d.Kill(ctx, id); !errdefs.IsNotFound(err) {
			t.Errorf("Kill(%s) of an unknown execution: %v, want NotFound", id, err)
		}
		if _, err := s.d.Stats(ctx, id); err == nil {
			t.Errorf("Stats(%s) of an unknown execution succeeded", id)
		}
		if err := s.d.Cleanup(ctx, id); err != nil {
			t.Errorf("Cleanup(%s) of an unknown execution: %v, want nil", id, err)
		}
	}

	sb := s.start(t, options{})
	loop, err := sb.startProcess(ctx, &processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", counterLoop}}}, "")
	if err != nil {
		t.Fatalf("start the counter loop: %v", err)
	}
	defer loop.s.Close()
	counter, whileFrozen := sb.counterReader(t)
	waitFor(t, "the counter to advance", func() bool { return counter() > 2 })

	st, err := s.d.Stats(ctx, sb.spec.ExecID)
	if err != nil || st.MemoryBytes == 0 || st.Pids < 2 {
		t.Errorf("Stats of a running execution = %+v, %v; want some memory and at least 2 pids", st, err)
	}
	if alive, err := s.d.Alive(ctx, sb.spec.ExecID); !alive || err != nil {
		t.Errorf("Alive of a running execution = %v, %v; want true", alive, err)
	}
	if p, ok := s.d.(driver.Pauser); ok {
		if !whileFrozen {
			counter = nil
		}
		testPause(t, sb, p, counter)
	}

	procs := descendants(sb.inst.Pid)
	switch {
	case s.ownKernel && len(procs) != 0:
		// The sandbox's processes run in the guest kernel: the host sees
		// the VMM alone.
		t.Errorf("the VMM %d of an execution with its own kernel has host child processes %v, want none", sb.inst.Pid, procs)
	case !s.ownKernel && len(procs) == 0:
		t.Errorf("no processes found below the execution's init %d", sb.inst.Pid)
	}
	procs[sb.inst.Pid] = sb.inst.StartTime
	if err := s.d.Kill(ctx, sb.spec.ExecID); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	select {
	case <-sb.client.Done():
	case <-ctx.Done():
		t.Fatal("the guest channel did not end after Kill")
	}
	if alive, err := s.d.Alive(ctx, sb.spec.ExecID); alive || err != nil {
		t.Errorf("Alive after Kill = %v, %v; want false", alive, err)
	}
	for pid, start := range procs {
		if driver.ProcAlive(pid, start) {
			t.Errorf("process %d of the execution still runs after Kill", pid)
		}
	}
	if err := s.d.Kill(ctx, sb.spec.ExecID); err != nil {
		t.Errorf("Kill of a dead execution: %v, want nil", err)
	}
	if _, err := loop.wait(); err == nil {
		t.Error("the counter loop's stream ended cleanly although its execution was killed")
	}
}

// counterReader returns a function that reads /tmp/counter (0 means not
// readable yet) and whether it works while the execution is frozen. When the
// execution's root filesystem is a host directory it reads the file there,
// which works while the guest is frozen; otherwise (a disk image) it reads
// the file through the guest.
func (sb *sandbox) counterReader(t *testing.T) (func() int, bool) {
	parse := func(b []byte, err error) int {
		if err != nil {
			return 0
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	if fi, err := os.Stat(sb.spec.RootFS); err == nil && fi.IsDir() {
		path := filepath.Join(sb.spec.RootFS, "tmp", "counter")
		return func() int { return parse(os.ReadFile(path)) }, true
	}
	return func() int {
		b, _, err := sb.readFile(callCtx(t), "/tmp/counter")
		return parse(b, err)
	}, false
}

// testPause: a paused execution does not run (its counter stops and its CPU
// time does not move), and it continues after Resume.
func testPause(t *testing.T, sb *sandbox, p driver.Pauser, counter func() int) {
	ctx := callCtx(t)
	if err := p.Pause(ctx, sb.spec.ExecID); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = p.Resume(ctx, sb.spec.ExecID)
		}
	}()
	if alive, err := sb.d.Alive(ctx, sb.spec.ExecID); !alive || err != nil {
		t.Errorf("Alive of a paused execution = %v, %v; want true", alive, err)
	}
	before, err := sb.d.Stats(ctx, sb.spec.ExecID)
	if err != nil {
		t.Fatalf("Stats while paused: %v", err)
	}
	c1 := 0
	if counter != nil {
		c1 = counter()
	}
	// A frozen execution cannot move in any amount of time; this wait only
	// gives a running one the chance to show that it is not frozen.
	time.Sleep(300 * time.Millisecond)
	after, err := sb.d.Stats(ctx, sb.spec.ExecID)
	if err != nil {
		t.Fatalf("Stats while paused: %v", err)
	}
	// A VM's CPU time is its VMM process's, whose I/O and housekeeping
	// threads run while the vCPUs are stopped; that its guest does not run
	// is shown by the guest not answering below.
	if !sb.ownKernel && after.CPUNanos != before.CPUNanos {
		t.Errorf("CPU time moved from %d to %d ns while paused", before.CPUNanos, after.CPUNanos)
	}
	if counter != nil {
		if c2 := counter(); c2 != c1 {
			t.Errorf("the counter advanced from %d to %d while paused", c1, c2)
		}
	} else {
		t.Log("the root filesystem is not a host directory: the paused counter is observed through the guest, after Resume")
	}
	// Nor can it answer. (After the CPU time is measured: the request
	// wakes the VMM's I/O thread, which a tick may catch.)
	rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, rerr := sb.client.Control().Ready(rctx, connect.NewRequest(&controlv1.ReadyRequest{}))
	<-rctx.Done()
	rcancel()
	if rerr == nil {
		t.Error("a paused execution's guest answered Ready")
	}
	if err := p.Resume(ctx, sb.spec.ExecID); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	resumed = true
	if counter == nil {
		counter, _ = sb.counterReader(t)
		c1 = counter()
	}
	waitFor(t, "the counter to advance after Resume", func() bool { return counter() > c1 })
	if got := sb.sh(t, "echo resumed"); got != "resumed\n" {
		t.Errorf("after Resume the guest runs echo with output %q", got)
	}
}
