package guestd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// cgroupRoot is where the daemon mounts the guest's cgroup2 hierarchy.
const cgroupRoot = "/sys/fs/cgroup"

// workloadGroup is the cgroup, below cgroupRoot, of every process the daemon
// starts; the daemon itself stays in the root group, outside its limits.
const workloadGroup = "space-workload"

// workload caps the processes the daemon starts. Where the guest kernel is
// the sandbox's own (vm), nothing on the host limits tasks inside it: a fork
// bomb would take every task and CPU cycle, and the daemon would stop
// answering. With the workload in a child group under pids.max, the daemon
// keeps the headroom to serve its host and kill the bomb.
type workload struct {
	mu sync.Mutex // guards fd
	fd int        // directory of the workload group, or -1
}

// cgroupFD returns the workload group's directory descriptor, or -1.
func (w *workload) cgroupFD() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fd
}

// limitPids puts every later process under pids.max = max. Only the sandbox's
// init may do it, and only on a kernel with a cgroup2 pids controller it can
// mount; elsewhere (the ns runtime) the host enforces the limit and this
// answers why it did not apply.
func (d *Daemon) limitPids(max uint32) error {
	if !d.cfg.ReapAll {
		return errors.New("not the sandbox's init")
	}
	if err := d.prepareWorkload(); err != nil {
		return err
	}
	dir := filepath.Join(cgroupRoot, workloadGroup)
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatUint(uint64(max), 10)), 0); err != nil {
		return fmt.Errorf("set pids.max: %w", err)
	}
	return nil
}

// prepareWorkload makes the workload group (cgroup2 mounted, pids, cpu and
// memory controllers on, the group made with a low CPU weight and its memory
// capped below the daemon's reserve, see reserveMemory) and has every later
// process start in it; it is done once. None of it depends on the sandbox:
// a VM's init does it at start (Config.PrepareWorkload), before its template
// snapshot is taken, so that the Init of a VM restored from that snapshot
// (a warm pool's claim) only writes the limit.
func (d *Daemon) prepareWorkload() error {
	d.workload.mu.Lock()
	ready := d.workload.fd >= 0
	d.workload.mu.Unlock()
	if ready {
		return nil
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err != nil {
		if err := unix.Mount("cgroup2", cgroupRoot, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("mount cgroup2 on %s: %w", cgroupRoot, err)
		}
	}
	controllers, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers"))
	if err != nil {
		return err
	}
	if !strings.Contains(" "+strings.TrimSpace(string(controllers))+" ", " pids ") {
		return fmt.Errorf("the kernel has no cgroup2 pids controller (controllers: %q)", strings.TrimSpace(string(controllers)))
	}
	if err := os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
		return fmt.Errorf("enable the pids controller: %w", err)
	}
	dir := filepath.Join(cgroupRoot, workloadGroup)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	// A low CPU weight for the workload: the daemon, idle most of the time,
	// still gets the CPU when it needs it, even against a busy fork bomb.
	// Without a cpu controller the pids cap alone still holds.
	if os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte("+cpu"), 0) == nil {
		if err := os.WriteFile(filepath.Join(dir, "cpu.weight"), []byte("10"), 0); err != nil {
			d.log.Warn("workload cpu weight", "err", err)
		}
	}
	if err := reserveMemory(dir); err != nil {
		// Without it the guest kernel's global OOM killer still protects
		// the daemon (oom_score_adj), but slowly, after thrashing.
		d.log.Warn("workload memory cap", "err", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	d.workload.mu.Lock()
	old := d.workload.fd
	d.workload.fd = fd
	d.workload.mu.Unlock()
	if old >= 0 {
		unix.Close(old)
	}
	return nil
}

// daemonReserveBytes is the least memory the workload group's cap keeps
// for the daemon, the kernel's own allocations and the page cache of the
// binaries the daemon runs; a VM keeps an eighth of its RAM when that is
// more.
const daemonReserveBytes = 32 << 20

// workloadMemoryMax is the workload group's memory.max in a guest whose
// MemTotal is total bytes: all of it less the daemon's reserve, and never
// less than half of it (a VM too small for the reserve gives its workload
// half and the daemon the rest).
func workloadMemoryMax(total uint64) uint64 {
	reserve := max(uint64(daemonReserveBytes), total/8)
	if total < 2*reserve {
		return total / 2
	}
	return total - reserve
}

// reserveMemory caps the workload group's memory below the VM's RAM and
// gives it no swap. A process that touches more than the VM has is then
// OOM-killed by its group, at once, rather than by the guest's global OOM
// killer after the kernel has thrashed every page of the daemon's and the
// binaries' text out and back (under TCG that took longer than the
// channel's liveness deadline).
func reserveMemory(dir string) error {
	controllers, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers"))
	if err != nil {
		return err
	}
	if !strings.Contains(" "+strings.TrimSpace(string(controllers))+" ", " memory ") {
		return fmt.Errorf("the kernel has no cgroup2 memory controller (controllers: %q)", strings.TrimSpace(string(controllers)))
	}
	if err := os.WriteFile(filepath.Join(cgroupRoot, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
		return fmt.Errorf("enable the memory controller: %w", err)
	}
	meminfo, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return err
	}
	total, err := memTotal(meminfo)
	if err != nil {
		return err
	}
	limit := strconv.FormatUint(workloadMemoryMax(total), 10)
	if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(limit), 0); err != nil {
		return fmt.Errorf("set memory.max: %w", err)
	}
	// memory.swap.max exists only on a kernel with swap accounting.
	if err := os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("set memory.swap.max: %w", err)
	}
	return nil
}

// memTotal returns MemTotal of a /proc/meminfo, in bytes.
func memTotal(meminfo []byte) (uint64, error) {
	for line := range strings.SplitSeq(string(meminfo), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			kib, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil || kib == 0 || kib > 1<<44 {
				break
			}
			return kib << 10, nil
		}
	}
	return 0, errors.New("no MemTotal in /proc/meminfo")
}

// forkInWorkload runs fork on the daemon's forker: one OS thread, moved into
// the workload's v1 groups (Config.WorkloadTasks) once and kept there, so
// that every process it forks is born in the workload's groups. Moving a
// thread between v1 groups takes the kernel's global cgroup threadgroup lock
// for writing, which waits for every fork in flight on the host; moving a
// thread in and out for each fork made a quiet sandbox's execs wait behind a
// neighbour's fork bomb (catalogue C-4). Without tasks files fork runs as is.
func (d *Daemon) forkInWorkload(fork func() (int, error)) (int, error) {
	if len(d.cfg.WorkloadTasks) == 0 {
		return fork()
	}
	d.forkerOnce.Do(func() {
		d.forks = make(chan forkRequest)
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.runForker(d.forks)
		}()
	})
	req := forkRequest{fork: fork, done: make(chan forkResult, 1)}
	select {
	case d.forks <- req:
	case <-d.closed:
		return 0, errors.New("the daemon is closing")
	}
	r := <-req.done
	return r.pid, r.err
}

type forkRequest struct {
	fork func() (int, error)
	done chan forkResult
}

type forkResult struct {
	pid int
	err error
}

// runForker serves fork requests on a thread locked to it for the daemon's
// life: a thread in the workload's groups is never handed back to the Go
// runtime, which would run other goroutines there (and, on an unlocked
// thread, clone its new threads from it, into the workload's pids cap). The
// runtime creates its threads from a thread of its own while this one is
// locked. A thread that could not enter every group answers each request
// with the error and tries again at the next. It ends when the daemon
// closes, and the thread with it.
func (d *Daemon) runForker(reqs <-chan forkRequest) {
	runtime.LockOSThread()
	tid := []byte(strconv.Itoa(unix.Gettid()))
	entered := false
	for {
		var req forkRequest
		select {
		case req = <-reqs:
		case <-d.closed:
			// The thread ends with its goroutine, still locked.
			return
		}
		if !entered {
			if err := writeTID(d.cfg.WorkloadTasks, tid); err != nil {
				// Partly entered: back into the daemon's groups, so that no
				// fork starts in a mix of the two.
				if berr := writeTID(d.cfg.DaemonTasks, tid); berr != nil {
					d.log.Error("the forker thread is in part of the workload's cgroups", "err", berr)
				}
				req.done <- forkResult{err: fmt.Errorf("enter the workload's cgroup: %w", err)}
				continue
			}
			entered = true
		}
		pid, err := req.fork()
		req.done <- forkResult{pid, err}
	}
}

// writeTID writes tid to each tasks file.
func writeTID(files []*os.File, tid []byte) error {
	for _, f := range files {
		if _, err := f.Write(tid); err != nil {
			return fmt.Errorf("%s: %w", f.Name(), err)
		}
	}
	return nil
}
