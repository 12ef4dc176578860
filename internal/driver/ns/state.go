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

// allocSlot returns the slot of sandboxID, allocating the lowest free one when
// it has none. Executions of one sandbox share its slot, so files it wrote in
// an earlier execution keep their owners. Callers hold the lock.
func (d *Driver) allocSlot(sandboxID string) (int, error) {
	free := -1
	for n := 0; n < d.cfg.Slots; n++ {
		b, err := os.ReadFile(d.slotPath(n))
		if errors.Is(err, fs.ErrNotExist) {
			if free < 0 {
				free = n
			}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("ns: read slot %d: %w", n, err)
		}
		if string(b) == sandboxID {
			return n, nil
		}
	}
	if free < 0 {
		return 0, fmt.Errorf("ns: all %d uid ranges are in use: %w", d.cfg.Slots, errdefs.ErrNoCapacity)
	}
	if err := os.WriteFile(d.slotPath(free), []byte(sandboxID), 0o600); err != nil {
		return 0, fmt.Errorf("ns: record slot %d: %w", free, err)
	}
	return free, nil
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
	if err := os.Remove(d.slotPath(n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ns: release slot %d: %w", n, err)
	}
	return nil
}
