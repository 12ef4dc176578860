package vm

// Executions whose state directory was removed. QEMU outlives every process
// of SPACE by design, so when a user deletes the data directory (or one
// execution's directory) nothing else would ever stop it: it would keep its
// memory, its CPU, its uid and the disk blocks of the disk.img it holds open.
//
// WatchRemoved, run by the node-manager for as long as it lives, stops them.
// It does not depend on having started the VMs, nor on any state file (the
// removal took state.json with it): it recognises a VM by its process, which
// runs in its execution's directory (QEMU's working directory, shown at its
// host path in the jail, see confine.go). A process is one of this driver's
// VMs whose directory was removed when
//
//   - its working directory is StateDir/exec/<a valid exec id>, and stat of
//     it says it has no links left (removed, wherever it was renamed to
//     before; a rename alone is not a removal),
//   - and it is QEMU: it runs as a uid of the driver's range (only QEMU
//     does, confine.go), or its executable is qemu-system-* (an unconfined
//     QEMU runs as root). An administrator's shell left in a removed
//     directory is neither.
//
// Such a process is killed through a pidfd opened before the checks are
// repeated, so a reused pid is never hit; the uid claim it held is released.
// Everything else QEMU holds dies with it: the jail's mount, network, IPC and
// UTS namespaces are its own, and the disk's blocks are freed when its last
// descriptor closes. (The vm runtime has no tap or loop device.) Its cgroup
// does not die with it: every pass also removes each VMM cgroup of this
// driver whose execution has no directory and that holds no task
// (cgroup.go) — the groups are this driver's alone, under a parent named
// after its state directory. A group that still holds a task is a VM whose
// directory was renamed, which is not a removal.
//
// A pass runs when WatchRemoved starts (a node-manager that restarts finds
// what was removed while it was down), whenever inotify reports that an entry
// of StateDir/exec was removed or moved away or that exec itself went, and
// every period as a fallback (an inotify queue overflow, an exec directory
// re-created after its removal).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
)

// DefaultRemovedCheckEvery is how often WatchRemoved looks for VMs whose
// directory was removed when inotify said nothing.
const DefaultRemovedCheckEvery = 30 * time.Second

// removedWatchMask is what WatchRemoved hears of StateDir/exec: an entry
// removed or moved away, or the directory itself gone.
const removedWatchMask = unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

// WatchRemoved stops the VMs whose execution directory was removed (see the
// top of this file), at once and then whenever inotify reports a removal
// under StateDir/exec, and every period (DefaultRemovedCheckEvery when 0),
// until ctx is done. It returns nil then; passes that fail are logged and
// retried at the next period.
func (d *Driver) WatchRemoved(ctx context.Context, period time.Duration) error {
	if period <= 0 {
		period = DefaultRemovedCheckEvery
	}
	w, err := newExecDirWatch(filepath.Join(d.cfg.StateDir, "exec"))
	if err != nil {
		return err
	}
	defer w.close()
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		if _, err := d.StopRemoved(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("looking for VMs whose directory was removed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.events:
		case <-tick.C:
			w.rewatch()
		}
	}
}

// StopRemoved kills every QEMU of this driver whose execution directory was
// removed, waits until each is gone, removes its cgroup and releases its
// uid. It returns the ids of the executions it stopped or whose cgroup it
// removed. Passes run one at a time: a pass that starts while another runs
// waits for it, and finds what that one left.
func (d *Driver) StopRemoved(ctx context.Context) ([]string, error) {
	d.removedMu.Lock()
	defer d.removedMu.Unlock()
	found, err := d.findRemoved()
	if err != nil {
		return nil, err
	}
	var stopped []string
	var errs []error
	for _, p := range found {
		killed, err := d.killRemoved(ctx, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if killed {
			d.log.Warn("stopped a VM whose execution directory was removed", "exec", p.execID, "pid", p.pid, "uid", p.uid)
			stopped = append(stopped, p.execID)
		}
	}
	left, err := d.removeLeftoverGroups(ctx, stopped)
	if err != nil {
		errs = append(errs, err)
	}
	for _, id := range left {
		if !slices.Contains(stopped, id) {
			stopped = append(stopped, id)
		}
	}
	if len(stopped) > 0 {
		if err := d.releaseStaleClaims(); err != nil {
			errs = append(errs, err)
		}
	}
	return stopped, errors.Join(errs...)
}

// removedVM is a QEMU process whose execution directory was removed.
type removedVM struct {
	execID    string
	pid       int
	startTime uint64
	uid       uint32
}

// findRemoved scans /proc for this driver's VMs whose directory was removed.
func (d *Driver) findRemoved() ([]removedVM, error) {
	base, n, err := d.uidRange()
	if err != nil {
		return nil, err
	}
	roots := d.execRoots()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("vm: list processes: %w", err)
	}
	var found []removedVM
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if p, ok := removedProcess(pid, roots, base, n); ok {
			found = append(found, p)
		}
	}
	return found, nil
}

// execRoots are the paths under which the kernel may name this driver's
// execution directories: StateDir/exec as configured, and with its symlinks
// resolved while it still exists.
func (d *Driver) execRoots() []string {
	root := filepath.Join(d.cfg.StateDir, "exec")
	roots := []string{root}
	if real, err := filepath.EvalSymlinks(root); err == nil && real != root {
		roots = append(roots, real)
	}
	return roots
}

// removedProcess reports whether pid is a QEMU of the execution directories
// under roots whose directory was removed (see the top of this file).
func removedProcess(pid int, roots []string, base, n uint32) (removedVM, bool) {
	proc := "/proc/" + strconv.Itoa(pid)
	execID, ok := removedCwd(proc, roots)
	if !ok {
		return removedVM{}, false
	}
	b, err := os.ReadFile(proc + "/status")
	if err != nil {
		return removedVM{}, false
	}
	ids, zombie, err := parseStatusIDs(b)
	if err != nil || zombie {
		return removedVM{}, false
	}
	uid := ids[0]
	inRange := uid >= base && uid-base < n
	if !inRange && !isQEMUExe(proc) {
		return removedVM{}, false
	}
	start, err := driver.ProcStartTime(pid)
	if err != nil {
		return removedVM{}, false
	}
	return removedVM{execID: execID, pid: pid, startTime: start, uid: uid}, true
}

// removedCwd returns the execution id of the process's working directory
// when it is an execution directory under one of roots and was removed.
func removedCwd(proc string, roots []string) (string, bool) {
	cwd, err := os.Readlink(proc + "/cwd")
	if err != nil {
		return "", false
	}
	cwd = strings.TrimSuffix(cwd, " (deleted)")
	id := filepath.Base(cwd)
	under := false
	for _, r := range roots {
		under = under || filepath.Dir(cwd) == r
	}
	if !under || driver.ValidID(id) != nil {
		return "", false
	}
	var st unix.Stat_t
	if err := unix.Stat(proc+"/cwd", &st); err != nil || st.Nlink != 0 {
		return "", false
	}
	return id, true
}

// isQEMUExe reports whether the process runs a qemu-system-* binary.
func isQEMUExe(proc string) bool {
	exe, err := os.Readlink(proc + "/exe")
	if err != nil {
		return false
	}
	return strings.HasPrefix(filepath.Base(strings.TrimSuffix(exe, " (deleted)")), "qemu-system-")
}

// killRemoved kills p through a pidfd after checking again, on the process
// the pidfd names, that it is p and its directory is removed; it returns
// once the process is gone. False: the process was gone already.
func (d *Driver) killRemoved(ctx context.Context, p removedVM) (bool, error) {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("vm: exec %s: pidfd_open %d: %w", p.execID, p.pid, err)
	}
	defer unix.Close(fd)
	base, n, err := d.uidRange()
	if err != nil {
		return false, err
	}
	again, ok := removedProcess(p.pid, d.execRoots(), base, n)
	if !ok || again.startTime != p.startTime || again.execID != p.execID {
		return false, nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return false, nil
		}
		return false, fmt.Errorf("vm: exec %s: kill QEMU pid %d: %w", p.execID, p.pid, err)
	}
	st := &state{ExecID: p.execID, Pid: p.pid, StartTime: p.startTime}
	if !waitGone(ctx, st, 10*time.Second) {
		return true, fmt.Errorf("vm: exec %s: QEMU pid %d still runs after SIGKILL", p.execID, p.pid)
	}
	return true, nil
}

// releaseStaleClaims removes the uid claims whose execution has no
// directory and whose uid no live process holds. It creates nothing, not
// even the lock file: it runs while a user removes the state directory
// (rm -r fails on a directory that gains a file as it empties it), and
// without the lock file, which the first claim made, there are no claims.
func (d *Driver) releaseStaleClaims() error {
	dir := filepath.Join(d.cfg.StateDir, uidClaimsDir)
	base, n, err := d.uidRange()
	if err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("vm: open uid lock: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("vm: lock %s: %w", lock.Name(), err)
	}
	claims, err := readUIDClaims(dir, base, n)
	if err != nil {
		return err
	}
	running, err := procIDs(base, n)
	if err != nil {
		return err
	}
	for uid, owner := range claims {
		if running[uid] || d.claimLive(owner) {
			continue
		}
		if err := os.Remove(claimPath(dir, uid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("vm: release uid claim %d of exec %s: %w", uid, owner, err)
		}
	}
	return nil
}

// execDirWatch reports removals under one directory through inotify.
type execDirWatch struct {
	dir string
	f   *os.File
	// watched is false while the directory is not watched: it went away
	// (the reader saw IN_IGNORED), or was not there yet.
	watched atomic.Bool
	events  chan struct{}
	done    chan struct{}
}

// newExecDirWatch watches dir; a dir that does not exist (yet) is watched
// from the first rewatch that finds it.
func newExecDirWatch(dir string) (*execDirWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("vm: inotify: %w", err)
	}
	w := &execDirWatch{dir: dir, f: os.NewFile(uintptr(fd), "inotify"), events: make(chan struct{}, 1), done: make(chan struct{})}
	w.rewatch()
	go w.read()
	return w, nil
}

// rewatch adds the watch of the directory when it is not watched: it
// went away, or was not there yet.
func (w *execDirWatch) rewatch() {
	if w.watched.Load() {
		return
	}
	rc, err := w.f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		if _, err := unix.InotifyAddWatch(int(fd), w.dir, removedWatchMask); err == nil {
			w.watched.Store(true)
		}
	})
}

// read signals events for every batch of inotify records until the watch
// is closed. A record that says the watch ended (IN_IGNORED, after the
// directory went) leaves the directory unwatched until rewatch.
func (w *execDirWatch) read() {
	defer close(w.done)
	buf := make([]byte, 4096)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return // closed
		}
		if ignored(buf[:n]) {
			w.watched.Store(false)
		}
		select {
		case w.events <- struct{}{}:
		default:
		}
	}
}

// ignored reports whether a batch of inotify records holds IN_IGNORED.
func ignored(b []byte) bool {
	for len(b) >= unix.SizeofInotifyEvent {
		mask := binary.NativeEndian.Uint32(b[4:8])
		nameLen := int(binary.NativeEndian.Uint32(b[12:16]))
		if mask&unix.IN_IGNORED != 0 {
			return true
		}
		b = b[min(len(b), unix.SizeofInotifyEvent+nameLen):]
	}
	return false
}

func (w *execDirWatch) close() {
	w.f.Close()
	<-w.done
}
