// Package vm is the virtual-machine runtime: each sandbox execution is a QEMU
// VM with its own kernel (package vmimage: Debian's cloud kernel on the q35
// machine, or the minimal kernel built from Debian's sources on the faster
// microvm machine, see machine.go), booting an initramfs whose /init is
// space-guest (package guestinit), on a reflink clone of the template's ext4
// root image. The guest channel is a virtio-serial port
// bound to a unix socket in the execution's state directory; the driver
// connects to it and hands the connection out as Instance.Channel. With
// Spec.Network the VM has one virtio-net interface whose frames travel on
// another such socket, handed out as Instance.Link (network.go).
//
// QEMU runs in its own session, so it outlives the process that started it,
// and everything after Start works from the state file (pid and start time of
// QEMU, paths) and QEMU's QMP socket: a new Driver over the same state
// directory manages VMs started by an old one.
//
// QEMU runs with the least it needs (confine.go; Config.Unconfined turns it
// off): as a uid and gid of its own per execution, claimed from
// [Config.UIDBase, +Config.UIDs) under StateDir/uids and released when
// Cleanup has removed the execution's directory; with no capabilities,
// no_new_privs and QEMU's seccomp filter (-sandbox on); in its own network
// namespace (empty: no host network; a guest NIC's backend is a socket the
// driver holds the other end of), IPC, UTS and mount namespaces, the last
// showing only a read-only tmpfs root with /usr, the host's /bin, /sbin and
// /lib* (symlinks or read-only binds), /etc/ld.so.cache, /dev/null, zero,
// random, urandom (and kvm, vhost-vsock when used), the kernel and initramfs,
// and its execution's directory, read-only but for disk.img: no /proc, /sys,
// /tmp, /home, /root, other /etc, nor any other execution. The sockets are
// bound by the root jail helper and passed to QEMU as descriptors, so QEMU
// creates no file anywhere, and nothing root opens in the directory can be
// swapped for a symlink by a compromised QEMU. The helper runs QEMU in a
// host cgroup of its own that caps its memory at the guest's RAM plus a
// bounded overhead, its tasks and its CPU time at the sandbox's CPUs
// (cgroup.go).
//
// Layout of StateDir/exec/<exec-id> (root:<vm gid>, 0710):
//
//	state.json    what a later process needs (see state)         root 0600
//	disk.img      the sandbox's root disk (clone of Spec.RootFS) root:<vm gid> 0660
//	guest.json    the per-VM guest configuration, via fw_cfg      root:<vm gid> 0640
//	ram           the guest's RAM, where it is a file (memfile.go) root:<vm gid> 0660
//	channel.sock  the guest channel (virtio-serial port "space.0")
//	qmp.sock      QEMU's control socket
//	net.sock      the network interface's frames (with Spec.Network only)
//	console.sock  the serial console, read into console.log by the starter
//	console.log   the console, capped (Config.ConsoleLogBytes, one rotation)
//	qemu.log      the jail helper's and QEMU's standard output and error
//
// A checkpoint (Checkpoint, Restore) is a directory of its own: the migration
// stream, a clone of the RAM file (where RAM is a file, memfile.go), a clone
// of the disk, the guest configuration, the machine's
// description and the manifest with every file's digest; QEMU writes the
// stream into a descriptor root opened, so every checkpoint file is root's.
// Template snapshots are such checkpoints under CacheDir/snapshots/<key>.
package vm

import (
	"golang.org/x/sys/unix"

	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spacesandbox/space/internal/cgroup"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/vmimage"
)

// Accelerators for Config.Accel.
const (
	AccelAuto = ""
	AccelKVM  = "kvm"
	AccelTCG  = "tcg"
)

// Config configures the driver.
type Config struct {
	// StateDir holds the driver's state; it must be a local filesystem that
	// survives restarts, and the same filesystem as the template images for
	// the disk clones to be reflinks.
	StateDir string
	// Kernel is the guest kernel: Debian's cloud kernel
	// (vmimage.FetchKernel) or the minimal one (vmimage.BuildMinimalKernel).
	Kernel *vmimage.Kernel
	// CacheDir holds the initramfs built for each guest binary (by content
	// hash) and the accelerator probe's result; default StateDir/cache.
	CacheDir string
	// QEMU is the qemu-system-x86_64 binary; default found on PATH.
	QEMU string
	// Accel forces an accelerator (AccelKVM or AccelTCG); AccelAuto probes
	// KVM by booting a guest once per host boot and falls back to TCG.
	Accel string
	// Machine is the QEMU machine type: MachineQ35 (Debian's cloud kernel),
	// MachineMicrovm (the minimal kernel), or MachineAuto, the one Kernel is
	// built for (see machine.go).
	Machine string
	// ProbeTimeout bounds the KVM probe boot; default 15s.
	ProbeTimeout time.Duration
	// DefaultMemoryMiB applies when Spec.MemoryMiB is 0; default 512.
	DefaultMemoryMiB int
	// ConsoleLogBytes caps console.log; one older file of the same size is
	// kept. Default 1 MiB.
	ConsoleLogBytes int64
	// Log receives the driver's events; default slog.Default().
	Log *slog.Logger
	// ColdBoot turns template snapshots off: every Start boots its VM.
	// By default the first Start of a root image, guest binary and size
	// boots a scratch VM once, saves it under CacheDir/snapshots, and this
	// and every later Start of the same inputs restore from that snapshot.
	ColdBoot bool
	// UIDBase is the first host uid (and gid) of the range QEMU processes
	// run as, one uid per execution; default 900000000. The range must not
	// overlap the ns runtime's or any other user's ids.
	UIDBase uint32
	// UIDs is the number of uids in the range (at most this many VMs run at
	// once); default 65536.
	UIDs int
	// Unconfined runs QEMU as root in the host's namespaces and in no
	// cgroup of its own, as the first version of the driver did, instead of
	// as its own uid in its jail and its cgroup (see confine.go, cgroup.go).
	// For debugging, and hosts that refuse mount namespaces.
	Unconfined bool
}

// Counters counts how executions started, since New.
type Counters struct {
	// ColdBoots counts executions started by booting.
	ColdBoots uint64
	// TemplateRestores counts Starts served by restoring a template snapshot.
	TemplateRestores uint64
	// TemplateBuilds counts template snapshots built (each a scratch boot).
	TemplateBuilds uint64
	// TemplateFailures counts template snapshots that could not be built
	// or restored (the Start then booted).
	TemplateFailures uint64
	// Restores counts executions restored from a checkpoint by Restore.
	Restores uint64
}

// Driver is the vm runtime driver.
type Driver struct {
	cfg Config
	log *slog.Logger
	// hier is the host's cgroup hierarchy (nil only for an unconfined
	// driver on a host without one); cgroupParent the parent of this
	// driver's VMM groups (cgroup.go).
	hier         *cgroup.Hierarchy
	cgroupParent string

	// mu serialises state creation and removal inside this process.
	mu sync.Mutex
	// accelMu guards accel, the accelerator chosen once per Driver.
	accelMu sync.Mutex
	accel   string
	// removedMu serialises the passes of StopRemoved: a pass of the
	// watcher and one called directly would otherwise both find the same
	// leftover cgroup, and each report it, or fail on the other's removal.
	removedMu sync.Mutex
	// boot is the kernel new VMs boot and the machine they run on; UseKernel
	// replaces it while VMs run (each execution keeps its own, in its state).
	boot atomic.Pointer[guestKernel]
	// bg tracks the goroutines of VMs started by this process (reaper and
	// console reader); both end when QEMU exits.
	bg sync.WaitGroup

	templates templates

	// memFileOnce decides once whether VMs get a file-backed RAM
	// (memfile.go): memFileOn says they do, memFileWhy why not.
	// noMemoryFile, set by tests before the first VM, keeps RAM anonymous.
	memFileOnce  sync.Once
	memFileOn    bool
	memFileWhy   string
	noMemoryFile bool
	// privateTemplateRAM, a measurement seam (BenchmarkIdlePSS), maps a
	// template snapshot's RAM file into each VM restored from it with
	// share=off over a hard link of it instead of a reflink per VM. Not for
	// production: QEMU 7.2 opens the file read-write (readonly=on would
	// make the guest's RAM a ROM), so one VM's QEMU could change the pages
	// of every VM from the template (docs/PERFORMANCE.md).
	privateTemplateRAM bool
	// verified remembers the checkpoint files whose digests were checked
	// (verifyCheckpoint).
	verified driver.VerifiedFiles
	// statfs is unix.Statfs (memoryFileRoom); a test seam.
	statfs func(string, *unix.Statfs_t) error

	coldBoots, templateRestores, templateBuilds, templateFailures, restores atomic.Uint64
}

var (
	_ driver.Driver       = (*Driver)(nil)
	_ driver.Pauser       = (*Driver)(nil)
	_ driver.Checkpointer = (*Driver)(nil)
	_ driver.Restorer     = (*Driver)(nil)
)

// New checks the configuration and prepares the state directory.
func New(cfg Config) (*Driver, error) {
	if err := driver.ValidHostPath("vm state dir", cfg.StateDir); err != nil {
		return nil, err
	}
	if cfg.Kernel == nil || cfg.Kernel.Vmlinuz == "" {
		return nil, fmt.Errorf("%w: vm: no guest kernel (vmimage.FetchKernel)", errdefs.ErrInvalidArgument)
	}
	machine, err := resolveMachine(cfg.Machine, cfg.Kernel)
	if err != nil {
		return nil, err
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(cfg.StateDir, "cache")
	}
	if cfg.QEMU == "" {
		p, err := exec.LookPath("qemu-system-x86_64")
		if err != nil {
			return nil, fmt.Errorf("%w: vm: qemu-system-x86_64 not found (apt-get install qemu-system-x86): %v", errdefs.ErrFailedPrecondition, err)
		}
		cfg.QEMU = p
	}
	switch cfg.Accel {
	case AccelAuto, AccelKVM, AccelTCG:
	default:
		return nil, fmt.Errorf("%w: vm: accelerator %q: want kvm, tcg or empty (probe)", errdefs.ErrInvalidArgument, cfg.Accel)
	}
	if cfg.ProbeTimeout == 0 {
		cfg.ProbeTimeout = 15 * time.Second
	}
	if cfg.DefaultMemoryMiB == 0 {
		cfg.DefaultMemoryMiB = 512
	}
	if cfg.ConsoleLogBytes == 0 {
		cfg.ConsoleLogBytes = 1 << 20
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	for _, dir := range []string{cfg.StateDir, filepath.Join(cfg.StateDir, "exec"), cfg.CacheDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("vm: create %s: %w", dir, err)
		}
	}
	d := &Driver{cfg: cfg, log: cfg.Log.With("driver", "vm"), accel: cfg.Accel, cgroupParent: CgroupParent(cfg.StateDir), statfs: unix.Statfs}
	// An unconfined driver makes no groups, but removes those a confined
	// one left over the same state directory.
	hier, err := cgroup.Detect()
	if err != nil && !cfg.Unconfined {
		return nil, fmt.Errorf("%w: vm: QEMU runs in a cgroup of its own: %v (or set Unconfined)", errdefs.ErrFailedPrecondition, err)
	}
	d.hier = hier
	d.boot.Store(&guestKernel{kernel: cfg.Kernel, machine: machine})
	d.log.Info("vm driver ready", "machine", machine, "kernel", cfg.Kernel.Vmlinuz, "kernel_release", cfg.Kernel.Release)
	d.templates.init()
	return d, nil
}

// Counters returns how executions started since New.
func (d *Driver) Counters() Counters {
	return Counters{
		ColdBoots:        d.coldBoots.Load(),
		TemplateRestores: d.templateRestores.Load(),
		TemplateBuilds:   d.templateBuilds.Load(),
		TemplateFailures: d.templateFailures.Load(),
		Restores:         d.restores.Load(),
	}
}

// Name returns "vm".
func (d *Driver) Name() string { return "vm" }

// Features reports pause (QMP stop/cont) and full snapshots (Checkpoint,
// Restore); the guest has its own kernel.
func (d *Driver) Features() driver.Features {
	return driver.Features{Pause: true, FullSnapshot: true}
}

// Wait blocks until every VM started by this Driver value has exited and
// been reaped. VMs outlive the Driver; Wait is for tests and orderly shutdown
// after Kill.
func (d *Driver) Wait() { d.bg.Wait() }

// Alive reports whether the execution's QEMU process still runs.
func (d *Driver) Alive(ctx context.Context, execID string) (bool, error) {
	st, err := d.loadState(execID)
	if err != nil {
		return false, err
	}
	return driver.ProcAlive(st.Pid, st.StartTime), nil
}

// scratchPrefix starts the ids of the scratch VMs the driver boots for
// itself to save template snapshots (template.go).
const scratchPrefix = "tpl-"

// scratchLeftover reports whether scratch VM id has no live builder: the
// process its id names is gone (or is another process with its pid), or the
// id is of a form without one (a driver before scratchID).
func scratchLeftover(id string) bool {
	f := strings.Split(strings.TrimPrefix(id, scratchPrefix), "-")
	if len(f) < 4 {
		return true
	}
	pid, err1 := strconv.Atoi(f[len(f)-3])
	start, err2 := strconv.ParseUint(f[len(f)-2], 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	return !driver.ProcAlive(pid, start)
}

// List returns the executions with a directory under StateDir/exec, and
// those whose VMM cgroup is left without one (cgroup.go; Cleanup removes
// it), but for the scratch VMs of the template snapshots being built, which
// no node knows of: their builder removes them when the snapshot is saved.
// A scratch VM whose builder died is listed, so that a node's gc cleans it
// up. A VM whose directory was removed is not listed by its directory;
// WatchRemoved stops it.
func (d *Driver) List(ctx context.Context) ([]string, error) {
	ids, err := driver.ListStateDirs(filepath.Join(d.cfg.StateDir, "exec"))
	if err != nil {
		return nil, fmt.Errorf("vm: %w", err)
	}
	left, err := d.leftoverGroups()
	if err != nil {
		return nil, err
	}
	for _, id := range left {
		if driver.ValidID(id) == nil && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.DeleteFunc(ids, func(id string) bool { return strings.HasPrefix(id, scratchPrefix) && !scratchLeftover(id) }), nil
}

// Kill stops the VM: QMP quit, then SIGKILL of the QEMU process if it has not
// exited within a second; it returns once QEMU is gone.
func (d *Driver) Kill(ctx context.Context, execID string) error {
	st, err := d.loadState(execID)
	if err != nil {
		return err
	}
	return d.kill(ctx, st)
}

func (d *Driver) kill(ctx context.Context, st *state) error {
	if !driver.ProcAlive(st.Pid, st.StartTime) {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	err := d.qmpExecute(qctx, st, "quit")
	cancel()
	if err == nil && waitGone(ctx, st, time.Second) {
		return nil
	}
	if err := killProc(st.Pid, st.StartTime); err != nil {
		return fmt.Errorf("vm: exec %s: %w", st.ExecID, err)
	}
	if !waitGone(ctx, st, 10*time.Second) {
		return fmt.Errorf("vm: exec %s: QEMU pid %d still runs after SIGKILL", st.ExecID, st.Pid)
	}
	return nil
}

// waitGone polls until the process is gone (a zombie counts as gone) or the
// wait or ctx ends.
func waitGone(ctx context.Context, st *state, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for driver.ProcAlive(st.Pid, st.StartTime) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// Cleanup kills the VM if it runs and removes its cgroup, disk clone and
// state. An unknown execution is already clean.
func (d *Driver) Cleanup(ctx context.Context, execID string) error {
	if err := driver.ValidID(execID); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	st, err := d.loadState(execID)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		// A crash between creating the directory and writing the state
		// leaves a directory without state; a removal that went wrong, a
		// cgroup without a directory.
		if _, serr := os.Lstat(d.execDir(execID)); errors.Is(serr, fs.ErrNotExist) {
			return d.removeVMMGroups(ctx, execID, nil)
		}
	case err != nil:
		return err
	default:
		if err := d.kill(ctx, st); err != nil {
			return err
		}
	}
	// The group goes before the directory: a group without a directory
	// is a leftover (StopRemoved), never a start under way.
	if err := d.removeVMMGroups(ctx, execID, st); err != nil {
		return err
	}
	if err := os.RemoveAll(d.execDir(execID)); err != nil {
		return fmt.Errorf("vm: exec %s: remove state and disk: %w", execID, err)
	}
	d.log.Info("execution cleaned up", "exec", execID)
	return nil
}

// Stats measures QEMU from /proc: its resident memory, CPU time and threads.
// MemoryLimitBytes is the guest's RAM (QEMU's own overhead comes on top,
// bounded by its cgroup, see cgroup.go).
func (d *Driver) Stats(ctx context.Context, execID string) (driver.Stats, error) {
	st, err := d.loadState(execID)
	if err != nil {
		return driver.Stats{}, err
	}
	ps, err := readProcStat(st.Pid, st.StartTime)
	if err != nil {
		return driver.Stats{}, fmt.Errorf("vm: exec %s: stats: %w", execID, err)
	}
	out := driver.Stats{
		MemoryBytes:      ps.rssBytes,
		MemoryLimitBytes: uint64(st.MemoryMiB) << 20,
		Pids:             ps.threads,
		CPUNanos:         ps.cpuNanos,
	}
	// The disk's use is the image's (imageUsage); a stat that fails leaves
	// it out rather than failing the memory and CPU readings.
	if used, size, err := imageUsage(filepath.Join(d.execDir(execID), diskFile)); err == nil {
		out.DiskBytes, out.DiskLimitBytes = used, size
	}
	return out, nil
}

// Pause stops the VM's vCPUs (QMP stop); the guest sees no time pass.
func (d *Driver) Pause(ctx context.Context, execID string) error {
	return d.qmpCommand(ctx, execID, "stop")
}

// Resume lets a paused VM continue (QMP cont).
func (d *Driver) Resume(ctx context.Context, execID string) error {
	return d.qmpCommand(ctx, execID, "cont")
}

func (d *Driver) qmpCommand(ctx context.Context, execID, cmd string) error {
	st, err := d.loadState(execID)
	if err != nil {
		return err
	}
	if !driver.ProcAlive(st.Pid, st.StartTime) {
		return fmt.Errorf("vm: exec %s: %s: %w: QEMU is not running", execID, cmd, errdefs.ErrFailedPrecondition)
	}
	if err := d.qmpExecute(ctx, st, cmd); err != nil {
		return fmt.Errorf("vm: exec %s: %w", execID, err)
	}
	return nil
}
