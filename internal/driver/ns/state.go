package ns

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
)

// state is what the driver persists about one execution, in
// StateDir/exec/<exec-id>/state.json. It is all a later process needs to kill,
// measure and clean up the execution.
type state struct {
	ExecID    string `json:"exec_id"`
	SandboxID string `json:"sandbox_id"`
	// Pid and StartTime name the sandbox's init process; 0 while starting.
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	// CgroupParent and the exec id name the cgroup.
	CgroupParent string `json:"cgroup_parent"`
	// OwnCPU: the cgroup's cpu-controller directory is the top-level
	// CgroupParent.ExecID (cgroup.Hierarchy.OwnCPUGroup), so that no other
	// sandbox's CPU time is billed to a group this one shares. False for an
	// execution started by an older node-manager, whose cpu directory is
	// below CgroupParent.
	OwnCPU bool `json:"own_cpu,omitempty"`
	// UIDBase is the first host uid (and gid) of the sandbox's range.
	UIDBase uint32 `json:"uid_base"`
	RootFS  string `json:"rootfs"`
	// Shifted is true when the rootfs was chowned into the range instead of
	// mounted with an id mapping.
	Shifted bool `json:"shifted,omitempty"`
	// Network: the execution has the tap sandboxnet.IfName.
	Network bool `json:"network,omitempty"`
}

func (d *Driver) execDir(execID string) string {
	return filepath.Join(d.cfg.StateDir, "exec", execID)
}

func (d *Driver) loadState(execID string) (*state, error) {
	if err := driver.ValidID(execID); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(d.execDir(execID), "state.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("ns: exec %s: %w", execID, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("ns: exec %s: read state: %w", execID, err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("ns: exec %s: state file is corrupt (remove %s to forget the execution): %w", execID, d.execDir(execID), err)
	}
	if st.ExecID != execID {
		return nil, fmt.Errorf("ns: exec %s: state file names exec %q", execID, st.ExecID)
	}
	return &st, nil
}

// saveState writes the state file atomically.
func (d *Driver) saveState(st *state) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	dir := d.execDir(st.ExecID)
	tmp := filepath.Join(dir, "state.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("ns: exec %s: write state: %w", st.ExecID, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "state.json")); err != nil {
		return fmt.Errorf("ns: exec %s: write state: %w", st.ExecID, err)
	}
	return nil
}

// lock takes the driver's cross-process lock (StateDir/lock) that serialises
// id-range allocation and state creation and removal; the returned function
// releases it.
func (d *Driver) lock() (func(), error) {
	d.mu.Lock()
	f, err := os.OpenFile(filepath.Join(d.cfg.StateDir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		d.mu.Unlock()
		return nil, fmt.Errorf("ns: open lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		d.mu.Unlock()
		return nil, fmt.Errorf("ns: lock %s: %w", f.Name(), err)
	}
	return func() { f.Close(); d.mu.Unlock() }, nil
}

// UID ranges. Root of sandbox slot n is host uid UIDBase + n*RangeSize; every
// sandbox gets a whole range so that the ids used inside (0..65535) all map.
const RangeSize = 65536

// slotPath is the file that records which sandbox owns a slot.
func (d *Driver) slotPath(n int) string {
	return filepath.Join(d.cfg.StateDir, "slots", strconv.Itoa(n))
}

// rangeBase is the first host uid of slot n.
func (d *Driver) rangeBase(n int) uint32 { return d.cfg.UIDBase + uint32(n)*RangeSize }

// allocSlot returns the slot of sandboxID, allocating the lowest free one when
// it has none: free here, and its uid range claimed on the host by no live
// sandbox of another driver (hostranges.go). Executions of one sandbox share
// its slot, so files it wrote in an earlier execution keep their owners.
// Callers hold the lock.
func (d *Driver) allocSlot(sandboxID string) (int, error) {
	unlock, err := d.ranges.lock()
	if err != nil {
		return 0, err
	}
	defer unlock()
	free := -1
	for n := 0; n < d.cfg.Slots; n++ {
		b, err := os.ReadFile(d.slotPath(n))
		if errors.Is(err, fs.ErrNotExist) {
			if free < 0 {
				ok, err := d.ranges.freeFor(d.rangeBase(n), sandboxID)
				if err != nil {
					return 0, err
				}
				if ok {
					free = n
				}
			}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("ns: read slot %d: %w", n, err)
		}
		if string(b) == sandboxID {
			return n, d.claimOnTheHost(n, sandboxID)
		}
	}
	if free < 0 {
		return 0, fmt.Errorf("ns: all %d uid ranges are in use (by this node's sandboxes or, on this host, another's): %w", d.cfg.Slots, errdefs.ErrNoCapacity)
	}
	if err := d.ranges.claim(d.rangeBase(free), free, sandboxID); err != nil {
		return 0, err
	}
	if err := os.WriteFile(d.slotPath(free), []byte(sandboxID), 0o600); err != nil {
		_ = d.ranges.release(d.rangeBase(free), sandboxID)
		return 0, fmt.Errorf("ns: record slot %d: %w", free, err)
	}
	return free, nil
}

// claimOnTheHost makes sure the host registry names sandboxID for slot n,
// which this driver gave it. A slot given before the registry existed may be
// another driver's too: that is logged (the two share host uids until one of
// them is deleted), and the claim is left to its live owner.
func (d *Driver) claimOnTheHost(n int, sandboxID string) error {
	base := d.rangeBase(n)
	c, ok, err := d.ranges.owner(base)
	if err != nil {
		return err
	}
	if ok && c.stateDir == d.ranges.stateDir && c.sandboxID == sandboxID {
		return nil
	}
	if ok && c.live() {
		d.log.Warn("this sandbox's uid range is also another driver's sandbox's: they share host uids until one is deleted",
			"sandbox", sandboxID, "uid_base", base, "other_state_dir", c.stateDir, "other_sandbox", c.sandboxID)
		return nil
	}
	return d.ranges.claim(base, n, sandboxID)
}

// claimSlotsOnTheHost claims on the host the ranges of the slots this
// driver's state directory already gives (a node-manager that ran before
// the registry, or on a host whose /run was cleared).
func (d *Driver) claimSlotsOnTheHost() error {
	unlock, err := d.lock()
	if err != nil {
		return err
	}
	defer unlock()
	entries, err := os.ReadDir(filepath.Join(d.cfg.StateDir, "slots"))
	if err != nil {
		return fmt.Errorf("ns: list slots: %w", err)
	}
	unlockHost, err := d.ranges.lock()
	if err != nil {
		return err
	}
	defer unlockHost()
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n < 0 || n >= d.cfg.Slots {
			continue
		}
		b, err := os.ReadFile(d.slotPath(n))
		if err != nil {
			continue
		}
		if err := d.claimOnTheHost(n, string(b)); err != nil {
			return err
		}
	}
	return nil
}

// releaseSlot frees the slot of sandboxID unless another execution of the same
// sandbox still has state. Callers hold the lock.
func (d *Driver) releaseSlot(sandboxID string, uidBase uint32) error {
	entries, err := os.ReadDir(filepath.Join(d.cfg.StateDir, "exec"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ns: list executions: %w", err)
	}
	for _, e := range entries {
		if st, err := d.loadState(e.Name()); err == nil && st.SandboxID == sandboxID {
			return nil
		}
	}
	n := int((uidBase - d.cfg.UIDBase) / RangeSize)
	if b, err := os.ReadFile(d.slotPath(n)); err != nil || string(b) != sandboxID {
		return nil // not ours (already released, or reused after a manual cleanup)
	}
	unlock, err := d.ranges.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.Remove(d.slotPath(n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ns: release slot %d: %w", n, err)
	}
	return d.ranges.release(d.rangeBase(n), sandboxID)
}
