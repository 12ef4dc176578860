package ns

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultHostRanges is the host-wide registry of the uid ranges ns drivers
// hand out (Config.HostRanges).
const DefaultHostRanges = "/run/space/ns-uid-ranges"

// The host-wide uid-range registry. A driver's slots (StateDir/slots) say
// which of its sandboxes owns which range, but two drivers on one host —
// two node-managers with their own data directories, as a scale-out test or
// a second node on one machine runs them, or a node-manager and the ns
// tests — would each hand out the first range to their first sandbox. Two
// sandboxes with the same host uids share what the kernel counts per user
// (inotify instances and watches, keyring quotas, pending signals,
// RLIMIT_NPROC) and own each other's files should either ever reach the
// other's. So every range in use is also claimed in one directory of the
// host, a file named after the range's first host uid and holding the
// claimer's state directory, slot and sandbox; a driver skips ranges claimed by a
// live owner, and a claim whose owner's slot file no longer names that
// sandbox (its state directory removed, the slot freed by a crash) is stale
// and taken over.

// hostRanges is a driver's view of the registry.
type hostRanges struct {
	dir      string
	stateDir string
}

// lock takes the registry's lock; the returned function releases it.
func (h hostRanges) lock() (func(), error) {
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		return nil, fmt.Errorf("ns: create the host uid-range registry: %w", err)
	}
	if err := checkRegistryDir(h.dir); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(h.dir, ".lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("ns: open the host uid-range lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("ns: lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

// checkRegistryDir refuses a registry another user than root could change:
// a claim written there could make a driver hand out a range in use.
func checkRegistryDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("ns: host uid-range registry %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 {
		return fmt.Errorf("ns: host uid-range registry %s must be a directory of root's that only root writes (mode %o, owner %d)", dir, st.Mode&0o7777, st.Uid)
	}
	return nil
}

// claimPath is the claim file of the range starting at host uid base.
func (h hostRanges) claimPath(base uint32) string {
	return filepath.Join(h.dir, strconv.FormatUint(uint64(base), 10))
}

// claimOf is what a claim file says.
type claimOf struct {
	stateDir  string
	slot      int
	sandboxID string
}

// owner reads the claim of the range at base, or ok false when there is
// none.
func (h hostRanges) owner(base uint32) (c claimOf, ok bool, err error) {
	f, err := os.OpenFile(h.claimPath(base), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return claimOf{}, false, nil
	}
	if err != nil {
		return claimOf{}, false, fmt.Errorf("ns: read the host claim of uid range %d: %w", base, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return claimOf{}, false, fmt.Errorf("ns: read the host claim of uid range %d: %w", base, err)
	}
	fields := strings.SplitN(string(b), "\n", 3)
	c.slot = -1
	if len(fields) == 3 {
		c.stateDir, c.sandboxID = fields[0], fields[2]
		if n, err := strconv.Atoi(fields[1]); err == nil {
			c.slot = n
		}
	}
	return c, true, nil
}

// freeFor reports whether the range at base may be claimed by sandboxID of
// this driver: no claim, its own, or a stale one.
func (h hostRanges) freeFor(base uint32, sandboxID string) (bool, error) {
	c, ok, err := h.owner(base)
	if err != nil || !ok {
		return err == nil, err
	}
	if c.stateDir == h.stateDir && c.sandboxID == sandboxID {
		return true, nil
	}
	return !c.live(), nil
}

// live reports whether the driver of the claim's state directory still
// gives its slot to its sandbox. A claim that cannot be judged (a garbled
// file, an unreadable slot) is kept: it is not ours to judge.
func (c claimOf) live() bool {
	if !filepath.IsAbs(c.stateDir) || c.sandboxID == "" || c.slot < 0 {
		return true
	}
	b, err := os.ReadFile(filepath.Join(c.stateDir, "slots", strconv.Itoa(c.slot)))
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	return err != nil || string(b) == c.sandboxID
}

// claim records that the range at base is sandboxID's of this driver.
func (h hostRanges) claim(base uint32, slot int, sandboxID string) error {
	tmp := h.claimPath(base) + ".tmp"
	if err := os.WriteFile(tmp, []byte(h.stateDir+"\n"+strconv.Itoa(slot)+"\n"+sandboxID), 0o600); err != nil {
		return fmt.Errorf("ns: claim host uid range %d: %w", base, err)
	}
	if err := os.Rename(tmp, h.claimPath(base)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("ns: claim host uid range %d: %w", base, err)
	}
	return nil
}

// release removes the claim of the range at base when it is sandboxID's of
// this driver.
func (h hostRanges) release(base uint32, sandboxID string) error {
	c, ok, err := h.owner(base)
	if err != nil || !ok || c.stateDir != h.stateDir || c.sandboxID != sandboxID {
		return err
	}
	if err := os.Remove(h.claimPath(base)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ns: release host uid range %d: %w", base, err)
	}
	return nil
}
