// Package drivertest is the conformance suite every runtime driver passes
// (driver/ns, driver/vm). It starts real executions running the real
// guest daemon (space-guest) on the minimal template and drives them through
// the guest protocol, as the host bridge does: exec, streaming, stdin,
// signals, PTY, env/cwd/user, files (a 100 MiB streamed round trip), watch,
// limits (memory, a fork bomb), isolation from the host and from other
// executions, the lifecycle (kill, cleanup, stats, pause) and the control
// service (identity, reseed).
//
// A driver's test calls Run with a Harness. Every execution a subtest starts
// is cleaned up by that subtest, and the cleanup checks that no process of the
// execution is left (by pid and start time).
//
// Where a runtime's nature changes what a check can see, the suite asks the
// driver (Features.SharesHostKernel) and runs the check that holds for it,
// never none: a sandbox on the host's kernel is bounded by host cgroups and
// seen in the host's process tree; a sandbox with its own kernel (a VM) is
// bounded by its VM's size, its processes live in the guest kernel and the
// host sees one VMM process.
package drivertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/guest"
)

// Harness gives the suite what one driver implementation needs.
type Harness struct {
	// New returns the driver under test. Run calls it once and shares the
	// driver between subtests (some in parallel); the harness releases what
	// the driver holds with t.Cleanup.
	New func(t *testing.T) driver.Driver
	// RootFS returns the root filesystem for the execution execID, in the
	// form the driver takes as Spec.RootFS: for ns a fresh writable copy of
	// the minimal template (busybox, accounts root and user 1000), removed
	// by the harness with t.Cleanup (MinimalRootFS builds one); for vm the
	// minimal template's root image file, which the driver clones itself.
	RootFS func(t *testing.T, execID string) string
	// GuestBinary is the static space-guest binary (BuildGuest builds it).
	GuestBinary string
	// WorkloadLimits, when the driver keeps a reserve of the sandbox's
	// memory and tasks for the guest daemon (ns on cgroup v1), returns the
	// workload's caps within a sandbox's: the processes the daemon starts
	// run in a child cgroup "workload" under them. Nil: no reserve.
	WorkloadLimits func(memBytes int64, pids int) (int64, int)
}

// Run runs the conformance suite against the driver h.New returns.
func Run(t *testing.T, h Harness) {
	if h.New == nil || h.RootFS == nil || h.GuestBinary == "" {
		t.Fatal("drivertest: the harness needs New, RootFS and GuestBinary")
	}
	s := &suite{h: h, d: h.New(t)}
	s.ownKernel = !s.d.Features().SharesHostKernel
	groups := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		{"Exec", testExec},
		{"Files", testFiles},
		{"Limits", testLimits},
		{"Isolation", testIsolation},
		{"Lifecycle", testLifecycle},
		{"Identity", testIdentity},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			g.fn(t, s)
		})
	}
}

// suite is the state shared by every subtest of one Run.
type suite struct {
	h Harness
	d driver.Driver
	// ownKernel is true when the sandbox runs on a kernel of its own (a
	// VM): its processes, pids and memory are the guest kernel's, and the
	// host sees only the VMM process.
	ownKernel bool
	// seq numbers executions so that their ids are unique within the run.
	seq atomic.Int64
}

// Timeouts of the suite. They bound waits so that a broken driver fails
// instead of hanging; they are not speed assertions.
const (
	startTimeout = time.Minute
	readyTimeout = 30 * time.Second
	callTimeout  = 30 * time.Second
)

// options change the spec of one execution.
type options struct {
	memoryMiB, pidsMax, cpus int
	env                      map[string]string
}

// sandbox is one started execution and a guest client over its channel.
type sandbox struct {
	d      driver.Driver
	spec   driver.Spec
	inst   *driver.Instance
	client *guest.Client
	// ownKernel is the suite's ownKernel.
	ownKernel bool
}

// start launches an execution, connects to its guest and waits until the
// guest answers Ready. The execution is cleaned up, and checked to leave no
// process behind, when t ends.
func (s *suite) start(t *testing.T, o options) *sandbox {
	t.Helper()
	id := fmt.Sprintf("ct-%d-%d", os.Getpid(), s.seq.Add(1))
	spec := driver.Spec{
		ExecID: id, SandboxID: "sb-" + id, RootFS: s.h.RootFS(t, id), GuestBinary: s.h.GuestBinary,
		Hostname: "box-" + id, CPUs: o.cpus, MemoryMiB: o.memoryMiB, PidsMax: o.pidsMax, Env: o.env,
	}
	if spec.MemoryMiB == 0 {
		spec.MemoryMiB = 256
	}
	if spec.PidsMax == 0 {
		spec.PidsMax = 256
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	inst, err := s.d.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start(%s): %v", id, err)
	}
	sb := &sandbox{d: s.d, spec: spec, inst: inst, ownKernel: s.ownKernel}
	t.Cleanup(func() { sb.cleanup(t) })
	if inst.ExecID != id || inst.Pid <= 0 || inst.Channel == nil {
		t.Fatalf("Start(%s) returned %+v: want the exec id, a pid and a channel", id, inst)
	}
	if ids, err := s.d.List(ctx); err != nil || !slices.Contains(ids, id) || !slices.IsSorted(ids) {
		t.Errorf("List after Start(%s) = %v, %v; want the execution in a sorted list", id, ids, err)
	}
	conn, err := net.FileConn(inst.Channel)
	inst.Channel.Close()
	if err != nil {
		t.Fatalf("exec %s: guest channel as a net.Conn: %v", id, err)
	}
	sb.client, err = guest.NewClient(conn)
	if err != nil {
		conn.Close()
		t.Fatalf("exec %s: guest client: %v", id, err)
	}
	if err := waitReady(sb.client); err != nil {
		t.Fatalf("exec %s: %v", id, err)
	}
	return sb
}

// waitReady calls Control.Ready until it answers or readyTimeout passes.
func waitReady(c *guest.Client) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := c.Control().Ready(ctx, connect.NewRequest(&controlv1.ReadyRequest{}))
		cancel()
		if err == nil {
			if resp.Msg.GetVersion() == "" {
				return errors.New("guest Ready: empty version")
			}
			return nil
		}
		select {
		case <-c.Done():
			return fmt.Errorf("guest channel closed before Ready: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("guest not ready after %v: %w", readyTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cleanup removes the execution and checks that none of its processes (the
// init and every descendant seen just before) still runs, that Cleanup is
// idempotent and that the execution is gone for the driver.
func (sb *sandbox) cleanup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	procs := descendants(sb.inst.Pid)
	if driver.ProcAlive(sb.inst.Pid, sb.inst.StartTime) {
		procs[sb.inst.Pid] = sb.inst.StartTime
	}
	if err := sb.d.Cleanup(ctx, sb.spec.ExecID); err != nil {
		t.Errorf("Cleanup(%s): %v", sb.spec.ExecID, err)
	}
	if sb.client != nil {
		sb.client.Close()
	}
	for pid, st := range procs {
		if driver.ProcAlive(pid, st) {
			t.Errorf("exec %s: process %d still runs after Cleanup", sb.spec.ExecID, pid)
		}
	}
	if err := sb.d.Cleanup(ctx, sb.spec.ExecID); err != nil {
		t.Errorf("second Cleanup(%s): %v, want nil (idempotent)", sb.spec.ExecID, err)
	}
	if alive, err := sb.d.Alive(ctx, sb.spec.ExecID); alive || (err != nil && !errdefs.IsNotFound(err)) {
		t.Errorf("Alive(%s) after Cleanup = %v, %v; want false or NotFound", sb.spec.ExecID, alive, err)
	}
	if ids, err := sb.d.List(ctx); err != nil || slices.Contains(ids, sb.spec.ExecID) {
		t.Errorf("List after Cleanup(%s) = %v, %v; want it without the execution", sb.spec.ExecID, ids, err)
	}
}

// descendants returns every process below pid (pid → start time), from the
// parent links of /proc/*/stat.
func descendants(pid int) map[int]uint64 {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return map[int]uint64{}
	}
	type proc struct {
		ppid  int
		start uint64
	}
	all := map[int]proc{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		ppid, err := statPPID(b)
		if err != nil {
			continue
		}
		st, err := driver.ParseStatStartTime(b)
		if err != nil {
			continue
		}
		all[p] = proc{ppid: ppid, start: st}
	}
	out := map[int]uint64{}
	// A process is a descendant when its parent chain reaches pid; pids
	// form a tree, so walking up terminates at 0 or 1.
	for p, pr := range all {
		for q, hops := pr.ppid, 0; q > 0 && hops < len(all); hops++ {
			if q == pid {
				out[p] = pr.start
				break
			}
			q = all[q].ppid
		}
	}
	return out
}

// statPPID returns field 4 of a /proc/<pid>/stat file.
func statPPID(stat []byte) (int, error) {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("proc stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, errors.New("proc stat: too few fields")
	}
	return strconv.Atoi(f[1])
}

// callCtx is the context of one guest call in a test.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}
