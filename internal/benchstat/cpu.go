package benchstat

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the times in /proc/stat: USER_HZ, which the kernel
// fixes at 100 on every architecture Linux exposes to user space through
// /proc (sysconf(_SC_CLK_TCK) reports it; Go cannot ask without cgo).
const userHZ = 100

// CPUTimes is the aggregate "cpu" line of /proc/stat: the whole machine's
// CPU time since boot, summed over its CPUs, in USER_HZ ticks.
type CPUTimes struct {
	// Busy is every field but idle and iowait: user, nice, system, irq,
	// softirq and steal (guest and guest_nice are already in user and nice).
	Busy uint64
	// Idle is idle plus iowait.
	Idle uint64
}

// ParseProcStat returns the aggregate "cpu" line of /proc/stat content.
// Content without that line, or with a field that is not a number, is an
// error: a zero would read as a machine that did no work.
func ParseProcStat(stat []byte) (CPUTimes, error) {
	sc := bufio.NewScanner(bytes.NewReader(stat))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		// user nice system idle iowait irq softirq [steal [guest [guest_nice]]]
		if len(f) < 8 {
			return CPUTimes{}, fmt.Errorf("/proc/stat: cpu line %q: %d fields, want at least 7 numbers", sc.Text(), len(f)-1)
		}
		var v [8]uint64
		for i := 1; i < len(f) && i <= len(v); i++ {
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return CPUTimes{}, fmt.Errorf("/proc/stat: cpu line field %d: %w", i, err)
			}
			v[i-1] = n
		}
		user, nice, system, idle, iowait, irq, softirq, steal := v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
		return CPUTimes{Busy: user + nice + system + irq + softirq + steal, Idle: idle + iowait}, nil
	}
	if err := sc.Err(); err != nil {
		return CPUTimes{}, fmt.Errorf("/proc/stat: %w", err)
	}
	return CPUTimes{}, fmt.Errorf("/proc/stat: no aggregate cpu line")
}

// ReadCPUTimes reads this machine's /proc/stat.
func ReadCPUTimes() (CPUTimes, error) {
	b, err := readSmall("/proc/stat")
	if err != nil {
		return CPUTimes{}, fmt.Errorf("read machine CPU: %w", err)
	}
	return ParseProcStat(b)
}

// BusySince returns the busy CPU time between start and t. A counter that
// went backwards (it never does on one boot) counts as none.
func (t CPUTimes) BusySince(start CPUTimes) time.Duration {
	if t.Busy < start.Busy {
		return 0
	}
	return time.Duration(t.Busy-start.Busy) * time.Second / userHZ
}

// PerOp divides busy CPU time among n operations; 0 for none.
func PerOp(busy time.Duration, n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return busy / time.Duration(n)
}
