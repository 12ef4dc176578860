package vm

// The VMM's host cgroup. A confined QEMU (confine.go) runs in a control
// group of its own, so that neither a guest nor a QEMU bug it triggers can
// take more of the host than the sandbox was given:
//
//   - memory: the guest's RAM plus a bounded overhead (vmmOverheadBytes),
//     and memory+swap capped at the same figure, so nothing is swapped out
//     instead; past it the host kernel reclaims QEMU's page cache and then
//     OOM-kills QEMU, never a neighbour;
//   - pids: vmmPidsMax tasks (QEMU cannot fork, -sandbox spawn=deny; its
//     threads are bounded);
//   - cpu: the sandbox's CPUs (cpu.max, or cfs_quota_us on v1), for the
//     vCPU threads and QEMU's own threads together.
//
// The driver creates the group, named after the execution id, under a
// parent of its state directory (cgroupParent), before QEMU starts; the
// root jail helper joins it (cgroup.Enter) before it binds a socket or
// builds the jail, and execs QEMU from inside it, so every page QEMU ever
// allocates — guest RAM, its copies of the kernel and initramfs, the TCG
// translation buffer — is charged to the group from the first. (On v1 a
// task moved after it allocated leaves its charges behind; that is why
// QEMU is never moved in.) The state file records the parent, so a driver
// started later (a node-manager restart) finds the group again; Cleanup
// removes the group before the execution's directory, and a group whose
// execution has no directory is a leftover: StopRemoved removes it once
// it is empty (having killed the QEMU of a removed directory), List
// reports it and Cleanup kills what is in it and removes it.
//
// An unconfined QEMU (Config.Unconfined) runs in no group of its own: the
// jail helper is what joins before QEMU runs, and moving a running QEMU
// in would bound only what it allocates after the move (on v1), which is
// not the documented limit. Unconfined is for debugging and hosts that
// refuse the jail's namespaces, which mostly cannot create groups either.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/cgroup"
	"github.com/spacesandbox/space/internal/errdefs"
)

// The VMM's memory overhead above the guest's RAM (measured in
// docs/design/foundation.md, "The VMM's cgroup"). QEMU holds, besides the
// guest's RAM:
//
//   - its own heap, stacks, device state and the libraries it maps:
//     vmmBaseOverheadMiB;
//   - page tables of the guest's RAM (the host's and, under KVM, the
//     EPT), dirty bitmaps and the buffers of a migration: 1/vmmRAMShare of
//     the RAM;
//   - a copy of the kernel and the initramfs, kept to serve them to the
//     firmware (fw_cfg): their sizes, read when the group is made;
//   - under TCG, the translation buffer: tcgTBSizeMiB, which QEMU is told
//     (-accel tcg,tb-size=N). QEMU's default is an eighth of the host's
//     memory up to 1 GiB, which a guest that keeps generating code (a JIT,
//     self-modifying code) fills.
const (
	vmmBaseOverheadMiB = 96
	vmmRAMShare        = 64
	tcgTBSizeMiB       = 128
)

// vmmPidsBase is the VMM's task budget besides one thread per vCPU: QEMU's
// main loop, RCU and monitor threads and the block layer's worker pool (at
// most 64 threads), with room to spare. A QEMU that cannot start a thread
// aborts, so the cap sits well above what it uses.
const vmmPidsBase = 96

// CgroupParent is the parent group of the VMMs of the driver over
// stateDir: "space-vm-" and a digest of the directory, so that two drivers
// over different state directories on one host (two nodes, tests) never
// take each other's groups for leftovers. An execution's group is
// CgroupParent(stateDir)/<execution id> under each hierarchy (e2e's host
// inventory looks there for the groups a test's server left).
func CgroupParent(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return "space-vm-" + hex.EncodeToString(sum[:6])
}

// vmmOverheadBytes is what the VMM of st may hold above the guest's RAM;
// bootBytes is the size of its kernel and initramfs.
func vmmOverheadBytes(st *state, bootBytes int64) int64 {
	b := int64(vmmBaseOverheadMiB)<<20 + int64(st.MemoryMiB)<<20/vmmRAMShare + bootBytes
	if st.Accel != AccelKVM {
		b += tcgTBSizeMiB << 20
	}
	return b
}

// vmmPidsMax is the VMM's task cap for cpus vCPUs.
func vmmPidsMax(cpus int) int { return vmmPidsBase + cpus }

// vmmLimits are the limits of st's group.
func vmmLimits(st *state) (cgroup.Limits, error) {
	var boot int64
	for _, p := range []string{st.Kernel, st.Initrd} {
		fi, err := os.Stat(p)
		if err != nil {
			return cgroup.Limits{}, fmt.Errorf("%w: size the VMM's memory: %v", errdefs.ErrFailedPrecondition, err)
		}
		boot += fi.Size()
	}
	// Whole MiB, which the kernel keeps as written (it rounds to pages).
	boot = (boot + 1<<20 - 1) &^ (1<<20 - 1)
	return cgroup.Limits{
		MemoryBytes: int64(st.MemoryMiB)<<20 + vmmOverheadBytes(st, boot),
		PidsMax:     vmmPidsMax(st.CPUs),
		CPUs:        st.CPUs,
	}, nil
}

// vmmGroup is the group of execID's VMM under parent.
func (d *Driver) vmmGroup(parent, execID string) (*cgroup.Group, error) {
	if d.hier == nil {
		return nil, fmt.Errorf("%w: vm: this host has no cgroup hierarchy", errdefs.ErrFailedPrecondition)
	}
	return d.hier.Group(parent, execID)
}

// createVMMGroup records the group in st's state and creates it with st's
// limits; it returns the group's directories for the jail helper to enter.
// A group of the same name left by an execution of that id whose directory
// is gone (register just created it anew) is removed first.
func (d *Driver) createVMMGroup(ctx context.Context, st *state) ([]string, error) {
	l, err := vmmLimits(st)
	if err != nil {
		return nil, err
	}
	g, err := d.vmmGroup(d.cgroupParent, st.ExecID)
	if err != nil {
		return nil, err
	}
	st.Cgroup = d.cgroupParent
	if err := d.saveState(st); err != nil {
		return nil, err
	}
	if g.Exists() {
		d.log.Warn("removing a leftover VMM cgroup of the same execution id", "exec", st.ExecID, "cgroup", g.Dirs())
		if err := removeGroup(ctx, g); err != nil {
			return nil, err
		}
	}
	if err := g.Create(l); err != nil {
		// A partly created group (v1: one directory per controller) must
		// not stay behind.
		_ = g.Delete(ctx)
		return nil, fmt.Errorf("create the VMM's cgroup: %w", err)
	}
	d.log.Debug("VMM cgroup created", "exec", st.ExecID, "memory_bytes", l.MemoryBytes, "pids_max", l.PidsMax, "cpus", l.CPUs)
	return g.Dirs(), nil
}

// removeVMMGroups kills what is left in the VMM groups of execID (the one
// st records, and the one under the driver's parent, which a crash before
// the state was saved may have left) and removes them, then the parent if
// it is empty.
func (d *Driver) removeVMMGroups(ctx context.Context, execID string, st *state) error {
	if d.hier == nil {
		return nil
	}
	parents := []string{d.cgroupParent}
	if st != nil && st.Cgroup != "" && st.Cgroup != d.cgroupParent {
		parents = append(parents, st.Cgroup)
	}
	for _, p := range parents {
		g, err := d.vmmGroup(p, execID)
		if err != nil {
			return err
		}
		if err := removeGroup(ctx, g); err != nil {
			return fmt.Errorf("vm: exec %s: %w", execID, err)
		}
		if err := d.hier.RemoveParent(p); err != nil {
			d.log.Warn("remove the VMMs' parent cgroup", "parent", p, "err", err)
		}
	}
	return nil
}

// removeGroup kills every task of g and removes it; a group that does not
// exist is removed already.
func removeGroup(ctx context.Context, g *cgroup.Group) error {
	if !g.Exists() {
		return nil
	}
	if err := g.Kill(ctx); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("kill the tasks of cgroup %s: %w", strings.Join(g.Dirs(), ", "), err)
	}
	if err := g.Delete(ctx); err != nil {
		return fmt.Errorf("remove cgroup: %w", err)
	}
	return nil
}

// leftoverGroups returns the execution ids of the groups under the driver's
// parent whose execution has no directory: leftovers of a removal that
// went wrong (the directory removed by hand, a crash in Cleanup).
func (d *Driver) leftoverGroups() ([]string, error) {
	if d.hier == nil {
		return nil, nil
	}
	names, err := d.hier.Children(d.cgroupParent)
	if err != nil {
		return nil, fmt.Errorf("vm: list the VMM cgroups: %w", err)
	}
	var out []string
	for _, id := range names {
		if _, err := os.Lstat(d.execDir(id)); errors.Is(err, fs.ErrNotExist) {
			out = append(out, id)
		}
	}
	return out, nil
}

// removeLeftoverGroups removes the leftover groups (leftoverGroups) that
// hold no task any more, and those of killed, the executions whose QEMU the
// pass has just killed, and returns their ids. A killed QEMU may still sit
// in its group: its main thread is a zombie (so it counts as gone) while its
// other threads still exit and its memory is torn down; its group is killed
// again and removed once empty. Any other group that still holds a task is
// left: its QEMU runs in a directory that was renamed, not removed
// (StopRemoved kills the QEMU of a removed one first), and only an explicit
// Cleanup stops it.
func (d *Driver) removeLeftoverGroups(ctx context.Context, killed []string) ([]string, error) {
	ids, err := d.leftoverGroups()
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, id := range ids {
		g, err := d.vmmGroup(d.cgroupParent, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if pids, err := g.Procs(); err == nil && len(pids) > 0 && !slices.Contains(killed, id) {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, leftoverExitTimeout)
		err = d.removeVMMGroups(rctx, id, nil)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d.log.Warn("removed the cgroup of an execution whose directory is gone", "exec", id)
		removed = append(removed, id)
	}
	return removed, errors.Join(errs...)
}

// leftoverExitTimeout bounds the wait for the tasks of a killed QEMU's group
// to finish exiting.
const leftoverExitTimeout = 10 * time.Second

// tcgAccelOption is the -accel value under TCG: the translation buffer
// bounded to what vmmOverheadBytes counts.
var tcgAccelOption = "tcg,tb-size=" + strconv.Itoa(tcgTBSizeMiB)
