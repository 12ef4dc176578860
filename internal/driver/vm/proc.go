package vm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
)

// procStat is what Stats reads from /proc/<pid>/stat.
type procStat struct {
	startTime uint64
	cpuNanos  uint64
	threads   uint64
	rssBytes  uint64
}

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat; it is
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// readProcStat reads the process's stat file and checks its start time.
func readProcStat(pid int, startTime uint64) (*procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, fmt.Errorf("QEMU pid %d: %w", pid, errdefs.ErrNotFound)
	}
	ps, err := parseProcStat(b)
	if err != nil {
		return nil, err
	}
	if ps.startTime != startTime {
		return nil, fmt.Errorf("QEMU pid %d: %w (the pid now names another process)", pid, errdefs.ErrNotFound)
	}
	return ps, nil
}

// parseProcStat extracts utime (14), stime (15), num_threads (20),
// starttime (22) and rss (24, pages) from a /proc/<pid>/stat line. Parsing
// starts after the last ')' because the command name may hold anything.
func parseProcStat(b []byte) (*procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, errors.New("proc stat: no command name")
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3.
	field := func(n int) (uint64, error) {
		if n-3 >= len(f) {
			return 0, fmt.Errorf("proc stat: no field %d", n)
		}
		v, err := strconv.ParseUint(string(f[n-3]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc stat: field %d: %w", n, err)
		}
		return v, nil
	}
	var vals [5]uint64
	for k, n := range []int{14, 15, 20, 22, 24} {
		v, err := field(n)
		if err != nil {
			return nil, err
		}
		vals[k] = v
	}
	const nsPerTick = 1e9 / clockTicks
	return &procStat{
		cpuNanos:  (vals[0] + vals[1]) * nsPerTick,
		threads:   vals[2],
		startTime: vals[3],
		rssBytes:  vals[4] * uint64(os.Getpagesize()),
	}, nil
}

// killProc sends SIGKILL to pid if it still is the process that started at
// startTime. It signals through a pidfd opened before the check, so a pid
// reused after the check cannot be hit.
func killProc(pid int, startTime uint64) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	if !driver.ProcAlive(pid, startTime) {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill QEMU pid %d: %w", pid, err)
	}
	return nil
}
