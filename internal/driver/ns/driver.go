// Package ns is the namespaces runtime: each sandbox execution is a process
// tree in its own user, mount, pid, network, IPC, UTS and cgroup namespaces,
// pivot_root'ed into its own root filesystem, with root mapped to an
// unprivileged host uid range (whose first uid owns the user namespace, so the
// kernel's per-user budgets are the sandbox's own: owner.go), no_new_privs, a seccomp deny list and cgroup
// limits. It shares the host kernel, so it isolates less than the vm runtime
// and says so (Features.SharesHostKernel).
//
// The sandbox's first process is this host binary re-executed as "ns-init"
// (InitMain), which finishes the setup inside the namespaces and then execs the
// guest daemon. The host end of a socketpair is the guest channel.
//
// Everything after Start works from the state file and the cgroup, so a new
// Driver over the same state directory manages executions started by an old
// one (the node-manager restarts without stopping sandboxes).
package ns

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/cgroup"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/reexec"
)

// InitHelper is argv[0] of the sandbox's first process: the name under
// which the node-manager binary runs InitMain (reexec.Run).
const InitHelper = "space-ns-init"

// Config configures the driver.
type Config struct {
	// StateDir holds the driver's state (executions, uid slots, lock). It must
	// be on a local filesystem and survive restarts of the node-manager.
	StateDir string
	// CgroupParent is the parent group of every execution's group; default
	// "space".
	CgroupParent string
	// UIDBase is the first host uid of slot 0; default 1000000 (above the
	// ranges /etc/subuid usually hands out to users).
	UIDBase uint32
	// Slots is the number of uid ranges; default 1024.
	Slots int
	// HostRanges is the host-wide registry of the uid ranges in use, shared
	// by every ns driver of the host so that none hands out a range another
	// one gave (hostranges.go); default DefaultHostRanges. It must be a
	// directory only root writes.
	HostRanges string
	// InitPath and InitArgs run ns-init: InitPath with argv[0] InitHelper
	// and the arguments InitArgs; default this binary (reexec.Self), whose
	// main hands over to InitMain (reexec.Run), without arguments.
	InitPath string
	InitArgs []string
	// DefaultMemoryMiB applies when Spec.MemoryMiB is 0; default 1024.
	DefaultMemoryMiB int
	// DisableIDMap skips idmapped mounts and chowns the rootfs into the uid
	// range instead (the fallback used when the filesystem refuses idmaps).
	DisableIDMap bool
	// Log receives the driver's events; default slog.Default().
	Log *slog.Logger
}

// Driver is the ns runtime driver.
type Driver struct {
	cfg  Config
	hier *cgroup.Hierarchy
	log  *slog.Logger
	// timeNS: the kernel has time namespaces, and each sandbox gets its own
	// clocks (clock.go).
	timeNS bool

	// mu serialises, inside this process, what the state-directory flock
	// serialises across processes.
	mu sync.Mutex
	// ranges is the host-wide registry of uid ranges in use.
	ranges hostRanges
	// reapers tracks the goroutines waiting on sandboxes started by this
	// process; Wait blocks until they are gone.
	reapers sync.WaitGroup
}

var _ driver.Driver = (*Driver)(nil)
var _ driver.Pauser = (*Driver)(nil)

// New checks the host (cgroups) and prepares the state directory.
func New(cfg Config) (*Driver, error) {
	if err := driver.ValidHostPath("ns state dir", cfg.StateDir); err != nil {
		return nil, err
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "space"
	}
	if cfg.UIDBase == 0 {
		cfg.UIDBase = 1_000_000
	}
	if cfg.Slots == 0 {
		cfg.Slots = 1024
	}
	if cfg.HostRanges == "" {
		cfg.HostRanges = DefaultHostRanges
	}
	if cfg.UIDBase < RangeSize || uint64(cfg.UIDBase)+uint64(cfg.Slots)*RangeSize > 1<<32-2 {
		return nil, fmt.Errorf("%w: ns: uid base %d with %d slots does not fit the uid space above %d", errdefs.ErrInvalidArgument, cfg.UIDBase, cfg.Slots, RangeSize)
	}
	if cfg.InitPath == "" {
		cfg.InitPath = reexec.Self
	}
	if cfg.DefaultMemoryMiB == 0 {
		cfg.DefaultMemoryMiB = 1024
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	hier, err := cgroup.Detect()
	if err != nil {
		return nil, fmt.Errorf("ns: %w", err)
	}
	stateDir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("ns: state dir: %w", err)
	}
	d := &Driver{cfg: cfg, hier: hier, log: cfg.Log.With("driver", "ns"), timeNS: timeNamespaces(),
		ranges: hostRanges{dir: cfg.HostRanges, stateDir: stateDir}}
	if !d.timeNS {
		d.log.Warn("this kernel has no time namespaces (CONFIG_TIME_NS): sandboxes read the node's uptime and boot time")
	}
	if err := mkdirs(d); err != nil {
		return nil, err
	}
	if err := d.claimSlotsOnTheHost(); err != nil {
		return nil, err
	}
	return d, nil
}

func mkdirs(d *Driver) error {
	for _, dir := range []string{d.cfg.StateDir, filepath.Join(d.cfg.StateDir, "exec"), filepath.Join(d.cfg.StateDir, "slots")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("ns: create state dir: %w", err)
		}
	}
	return nil
}

// Name returns "ns".
func (d *Driver) Name() string { return "ns" }

// Features reports pause (freezer) and disk snapshots (of the rootfs volume);
// full snapshots need a VM.
func (d *Driver) Features() driver.Features {
	return driver.Features{Pause: true, DiskSnapshot: true, SharesHostKernel: true}
}

// Wait blocks until every sandbox started by this Driver value has exited and
// been reaped. Sandboxes outlive the Driver; Wait is for tests and orderly
// shutdown after Kill.
func (d *Driver) Wait() { d.reapers.Wait() }

// group is the execution's cgroup: on cgroup v1 a top-level group of its
// own in the cpu hierarchy (state.OwnCPU), below CgroupParent in the others.
func (d *Driver) group(st *state) (*cgroup.Group, error) {
	if st.OwnCPU {
		return d.hier.OwnCPUGroup(st.CgroupParent, st.ExecID)
	}
	return d.hier.Group(st.CgroupParent, st.ExecID)
}

// List returns the executions with a directory under StateDir/exec.
func (d *Driver) List(ctx context.Context) ([]string, error) {
	ids, err := driver.ListStateDirs(filepath.Join(d.cfg.StateDir, "exec"))
	if err != nil {
		return nil, fmt.Errorf("ns: %w", err)
	}
	return ids, nil
}

// Alive reports whether the execution's init process still runs.
func (d *Driver) Alive(ctx context.Context, execID string) (bool, error) {
	st, err := d.loadState(execID)
	if err != nil {
		return false, err
	}
	return driver.ProcAlive(st.Pid, st.StartTime), nil
}

// Kill SIGKILLs every process of the execution through its cgroup and waits
// for them to be gone.
func (d *Driver) Kill(ctx context.Context, execID string) error {
	st, err := d.loadState(execID)
	if err != nil {
		return err
	}
	g, err := d.group(st)
	if err != nil {
		return err
	}
	if err := g.Kill(ctx); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("ns: exec %s: kill: %w", execID, err)
	}
	return waitInitExited(ctx, st)
}

// waitInitExited waits until the execution's init has finished exiting. The
// kernel takes a task out of its cgroup early in its exit, and the init of a
// pid namespace then still waits for the namespace's other tasks, so an empty
// cgroup does not yet mean that Alive reports false. The init is killed
// directly too, for a start that failed before it joined its cgroup.
func waitInitExited(ctx context.Context, st *state) error {
	if driver.ProcAlive(st.Pid, st.StartTime) {
		_ = unix.Kill(st.Pid, unix.SIGKILL)
	}
	for driver.ProcAlive(st.Pid, st.StartTime) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("ns: exec %s: init %d still exiting after SIGKILL: %w", st.ExecID, st.Pid, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// Cleanup kills what is left of the execution and removes its cgroup, state
// and (when no other execution of the sandbox remains) its uid range. An
// unknown execution is already clean.
func (d *Driver) Cleanup(ctx context.Context, execID string) error {
	if err := driver.ValidID(execID); err != nil {
		return err
	}
	unlock, err := d.lock()
	if err != nil {
		return err
	}
	defer unlock()
	st, err := d.loadState(execID)
	if errors.Is(err, errdefs.ErrNotFound) {
		// A crash between creating the directory and writing the state leaves
		// an empty directory.
		if rerr := os.RemoveAll(d.execDir(execID)); rerr != nil {
			return fmt.Errorf("ns: exec %s: remove state: %w", execID, rerr)
		}
		return nil
	}
	if err != nil {
		return err
	}
	return d.cleanupLocked(ctx, st)
}

func (d *Driver) cleanupLocked(ctx context.Context, st *state) error {
	g, err := d.group(st)
	if err != nil {
		return err
	}
	if err := g.Kill(ctx); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("ns: exec %s: kill: %w", st.ExecID, err)
	}
	if err := waitInitExited(ctx, st); err != nil {
		return err
	}
	if err := g.Delete(ctx); err != nil {
		return fmt.Errorf("ns: exec %s: %w", st.ExecID, err)
	}
	if err := os.RemoveAll(d.execDir(st.ExecID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ns: exec %s: remove state: %w", st.ExecID, err)
	}
	if err := d.releaseSlot(st.SandboxID, st.UIDBase); err != nil {
		return fmt.Errorf("ns: exec %s: %w", st.ExecID, err)
	}
	d.log.Info("execution cleaned up", "exec", st.ExecID)
	return nil
}

// Stats reads the execution's cgroup counters.
func (d *Driver) Stats(ctx context.Context, execID string) (driver.Stats, error) {
	st, err := d.loadState(execID)
	if err != nil {
		return driver.Stats{}, err
	}
	g, err := d.group(st)
	if err != nil {
		return driver.Stats{}, err
	}
	s, err := g.Stats()
	if err != nil {
		return driver.Stats{}, fmt.Errorf("ns: exec %s: stats: %w", execID, err)
	}
	return driver.Stats{MemoryBytes: s.MemoryBytes, MemoryLimitBytes: s.MemoryLimitBytes, MemoryCacheBytes: s.MemoryCacheBytes,
		Pids: s.Pids, CPUNanos: s.CPUNanos}, nil
}

// Pause freezes every process of the execution.
func (d *Driver) Pause(ctx context.Context, execID string) error {
	return d.freeze(ctx, execID, true)
}

// Resume thaws a paused execution.
func (d *Driver) Resume(ctx context.Context, execID string) error {
	return d.freeze(ctx, execID, false)
}

func (d *Driver) freeze(ctx context.Context, execID string, frozen bool) error {
	st, err := d.loadState(execID)
	if err != nil {
		return err
	}
	g, err := d.group(st)
	if err != nil {
		return err
	}
	if frozen {
		err = g.Freeze(ctx)
	} else {
		err = g.Thaw(ctx)
	}
	if err != nil {
		return fmt.Errorf("ns: exec %s: freeze=%v: %w", execID, frozen, err)
	}
	return nil
}
