// Package driver defines the runtime driver contract: how a node starts, stops,
// measures and cleans up one sandbox execution, whatever the substrate (the
// namespaces runtime in driver/ns, the QEMU microVM runtime in driver/vm).
//
// Every operation after Start is keyed by the execution id alone and works from
// kernel and on-disk state (cgroups, a small state file under the driver's state
// directory), never from memory of the process that called Start: a restarted
// node-manager must be able to Kill, measure and Cleanup executions started by
// its previous incarnation.
//
// Optional abilities (Pauser, and later checkpoint/restore) are one-method-set
// interfaces that callers probe for with a type assertion; Features says up front
// what a driver supports so the lifecycle can plan without trying.
package driver

import (
	"context"
	"os"
)

// Spec describes one execution to start. Validate checks every field.
type Spec struct {
	// ExecID names the execution; [a-z0-9-]{1,64}. Every later call uses it.
	ExecID string
	// SandboxID names the logical sandbox the execution serves; same charset.
	SandboxID string
	// RootFS is the absolute, clean host path of the execution's writable root
	// filesystem (a copy-on-write clone of a template).
	RootFS string
	// GuestBinary is the absolute, clean host path of the static space-guest
	// binary to run as the sandbox's init.
	GuestBinary string
	// Hostname is the sandbox's host name; empty means the SandboxID.
	Hostname string
	// CPUs caps CPU time at this many CPUs; 0 means no cap.
	CPUs int
	// MemoryMiB caps memory; 0 means the driver's default.
	MemoryMiB int
	// PidsMax caps the number of tasks; 0 means the driver's default.
	PidsMax int
	// Env is the guest daemon's initial environment.
	Env map[string]string
	// OwnDisk says RootFS is a sandbox's own disk (a stopped sandbox's, or a
	// disk snapshot), not a template: the driver boots it and never keeps
	// a template snapshot of it.
	OwnDisk bool
	// Network gives the execution one network interface (sandboxnet.IfName,
	// configured with sandboxnet's addresses) whose other end is
	// Instance.Link: the node's gateway. Without it the execution has
	// loopback only.
	Network bool
}

// Instance is a started execution.
type Instance struct {
	// ExecID is the execution's id.
	ExecID string
	// Pid is the host pid of the execution's init process (the sandbox's PID 1
	// for ns, the VMM for vm).
	Pid int
	// StartTime is field 22 of /proc/<Pid>/stat: with Pid it names the process
	// without the risk of pid reuse.
	StartTime uint64
	// Channel is the host end of the guest's dedicated byte stream. The caller
	// owns it and must close it.
	Channel *os.File
	// Link is the host end of the execution's network interface when
	// Spec.Network was set, else nil. The caller owns it.
	Link *Link
}

// LinkReopener is implemented by drivers that can give a running execution
// a new network link after the holder of the old one went away (a node
// restart). It fails with ErrConflict while the old link is still held.
type LinkReopener interface {
	ReopenLink(ctx context.Context, execID string) (*Link, error)
}

// LinkFraming says how Ethernet frames travel on a Link's file.
type LinkFraming string

const (
	// FramingTap: every read returns one frame and every write sends one
	// (a tap device's file descriptor, IFF_TAP|IFF_NO_PI).
	FramingTap LinkFraming = "tap"
	// FramingStream: a byte stream of frames, each preceded by its length as
	// a 4-byte big-endian integer (QEMU's "-netdev stream").
	FramingStream LinkFraming = "stream"
)

// Link is the host end of a sandbox's network interface: Ethernet frames to
// and from the guest, which the gateway terminates.
type Link struct {
	File    *os.File
	Framing LinkFraming
}

// Close closes the link's file; a nil Link is fine.
func (l *Link) Close() error {
	if l == nil || l.File == nil {
		return nil
	}
	return l.File.Close()
}

// Features says which optional abilities a driver has.
type Features struct {
	// Pause means the driver implements Pauser.
	Pause bool
	// FullSnapshot means the driver can checkpoint memory and device state.
	FullSnapshot bool
	// DiskSnapshot means the root filesystem can be snapshotted while running.
	DiskSnapshot bool
	// SharesHostKernel means the sandbox runs on the host's kernel (weaker
	// isolation: a kernel bug is a sandbox escape).
	SharesHostKernel bool
}

// Stats is a point-in-time measure of an execution's resource use.
type Stats struct {
	// MemoryBytes is the memory charged to the execution.
	MemoryBytes uint64
	// MemoryLimitBytes is the memory cap, 0 when unlimited.
	MemoryLimitBytes uint64
	// MemoryCacheBytes is the page cache in MemoryBytes, as the host
	// accounts it (0 where the runtime does not: a VM's guest has its own).
	MemoryCacheBytes uint64
	// Pids is the number of tasks.
	Pids uint64
	// CPUNanos is the CPU time consumed, in nanoseconds.
	CPUNanos uint64
	// DiskBytes and DiskLimitBytes are what the execution's disk holds and
	// can hold, when the driver itself knows (vm: its disk image); 0 when
	// the volume store accounts the disk instead (ns).
	DiskBytes, DiskLimitBytes uint64
}

// Driver runs sandbox executions on one substrate.
type Driver interface {
	// Name is the substrate's name as used in the API: "ns" or "vm".
	Name() string
	// Features reports the optional abilities.
	Features() Features
	// Start launches an execution and returns once its guest daemon has been
	// exec'd (or fails with the real reason). It never outlives ctx.
	Start(ctx context.Context, spec Spec) (*Instance, error)
	// Kill stops every process of the execution. Killing a dead or unknown
	// execution is not an error for a known one; unknown ids give NotFound.
	Kill(ctx context.Context, execID string) error
	// Cleanup releases everything Start created (cgroups, state, id ranges),
	// killing what still runs. It is idempotent: an unknown id is a success.
	Cleanup(ctx context.Context, execID string) error
	// Stats measures a running execution.
	Stats(ctx context.Context, execID string) (Stats, error)
	// Alive reports whether the execution's init process still runs.
	Alive(ctx context.Context, execID string) (bool, error)
	// List returns the ids of the executions the driver holds state for,
	// running or not, sorted: those Cleanup has something to release for.
	// The node compares it with its runtime records to find executions no
	// record refers to (`space node gc`).
	List(ctx context.Context) ([]string, error)
}

// DiskSnapshotter is implemented by drivers that keep an execution's root
// disk in their own state (vm): SnapshotDisk writes a point-in-time copy of
// it to dst (a reflink where the filesystem allows), which must not exist,
// while the execution runs. The caller freezes the guest's filesystem around
// the call so the copy is consistent. Drivers whose root is a volume (ns)
// are snapshotted through the volume driver instead.
type DiskSnapshotter interface {
	SnapshotDisk(ctx context.Context, execID, dst string) error
}

// Pauser is implemented by drivers that can freeze an execution in place and
// let it continue later; the execution identity does not change.
type Pauser interface {
	// Pause freezes every process (or vCPU) of the execution.
	Pause(ctx context.Context, execID string) error
	// Resume lets a paused execution continue.
	Resume(ctx context.Context, execID string) error
}
