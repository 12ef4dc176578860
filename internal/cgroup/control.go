package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Freeze stops every task of the group and returns once the kernel reports
// the group frozen (or ctx is done).
func (g *Group) Freeze(ctx context.Context) error {
	if g.h.Mode == V2 {
		return g.setFrozenV2(ctx, true)
	}
	return g.setFrozenV1(ctx, "FROZEN")
}

// Thaw lets a frozen group run again.
func (g *Group) Thaw(ctx context.Context) error {
	if g.h.Mode == V2 {
		return g.setFrozenV2(ctx, false)
	}
	return g.setFrozenV1(ctx, "THAWED")
}

func (g *Group) setFrozenV1(ctx context.Context, want string) error {
	d := g.dirs["freezer"]
	for {
		// Writing again while FREEZING is allowed and retries tasks that were
		// busy in the kernel.
		if err := write(d, "freezer.state", want); err != nil {
			return notFound(d, err)
		}
		b, err := os.ReadFile(filepath.Join(d, "freezer.state"))
		if err != nil {
			return fmt.Errorf("cgroup: read %s/freezer.state: %w", d, err)
		}
		if strings.TrimSpace(string(b)) == want {
			return nil
		}
		if err := sleep(ctx); err != nil {
			return fmt.Errorf("cgroup %s: waiting for %s: %w", d, want, err)
		}
	}
}

func (g *Group) setFrozenV2(ctx context.Context, frozen bool) error {
	d := g.dirs[""]
	val, want := "0", "frozen 0"
	if frozen {
		val, want = "1", "frozen 1"
	}
	if err := write(d, "cgroup.freeze", val); err != nil {
		return notFound(d, err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.events"))
		if err != nil {
			return fmt.Errorf("cgroup: read %s/cgroup.events: %w", d, err)
		}
		if strings.Contains(string(b), want) {
			return nil
		}
		if err := sleep(ctx); err != nil {
			return fmt.Errorf("cgroup %s: waiting for %q: %w", d, want, err)
		}
	}
}

// Frozen reports whether the group is frozen.
func (g *Group) Frozen() (bool, error) {
	if g.h.Mode == V2 {
		b, err := os.ReadFile(filepath.Join(g.dirs[""], "cgroup.events"))
		if err != nil {
			return false, notFound(g.dirs[""], err)
		}
		return strings.Contains(string(b), "frozen 1"), nil
	}
	b, err := os.ReadFile(filepath.Join(g.dirs["freezer"], "freezer.state"))
	if err != nil {
		return false, notFound(g.dirs["freezer"], err)
	}
	return strings.TrimSpace(string(b)) != "THAWED", nil
}

// Kill sends SIGKILL to every task of the group and waits (until ctx is done)
// for the group to be empty. On v2 it uses cgroup.kill; on v1 it freezes the
// group first so that no task can fork while the list is walked.
func (g *Group) Kill(ctx context.Context) error {
	if g.h.Mode == V2 && exists(g.dirs[""], "cgroup.kill") {
		if err := write(g.dirs[""], "cgroup.kill", "1"); err != nil {
			return notFound(g.dirs[""], err)
		}
	} else if err := g.killFrozen(ctx); err != nil {
		return err
	}
	for {
		pids, err := g.allProcs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		// A task that forked while being moved in may sit in some v1
		// hierarchies only: kill whatever any of them still holds.
		for _, p := range pids {
			_ = unix.Kill(p, unix.SIGKILL)
		}
		if err := sleep(ctx); err != nil {
			return fmt.Errorf("cgroup %s: %d tasks still exiting after SIGKILL: %w", g.primary(), len(pids), err)
		}
	}
}

// allProcs is the union of cgroup.procs over every hierarchy.
func (g *Group) allProcs() ([]int, error) {
	var all []int
	for _, d := range g.Dirs() {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("cgroup: read %s/cgroup.procs: %w", d, err)
		}
		pids, err := ParsePids(b)
		if err != nil {
			return nil, fmt.Errorf("cgroup: %s: %w", d, err)
		}
		for _, p := range pids {
			if !slices.Contains(all, p) {
				all = append(all, p)
			}
		}
	}
	return all, nil
}

func (g *Group) killFrozen(ctx context.Context) error {
	if err := g.Freeze(ctx); err != nil {
		return err
	}
	pids, err := g.Procs()
	if err == nil {
		for _, p := range pids {
			if kerr := unix.Kill(p, unix.SIGKILL); kerr != nil && !errors.Is(kerr, unix.ESRCH) {
				err = fmt.Errorf("cgroup: kill pid %d: %w", p, kerr)
			}
		}
	}
	// Thaw even when listing failed: frozen tasks only die once thawed.
	if terr := g.Thaw(context.WithoutCancel(ctx)); terr != nil && err == nil {
		err = terr
	}
	return err
}

// Stats is a group's resource use.
type Stats struct {
	// MemoryBytes is the memory charged to the group.
	MemoryBytes uint64
	// MemoryLimitBytes is the memory cap, 0 when unlimited.
	MemoryLimitBytes uint64
	// MemoryPeakBytes is the most memory ever charged to the group (v1's
	// memory.max_usage_in_bytes, v2's memory.peak; 0 on a v2 kernel
	// without memory.peak, before 5.19).
	MemoryPeakBytes uint64
	// MemoryCacheBytes is the page cache charged to the group (memory.stat:
	// v1's "cache", v2's "file"), part of MemoryBytes.
	MemoryCacheBytes uint64
	// Pids is the number of tasks.
	Pids uint64
	// CPUNanos is the CPU time used, 0 when not accounted.
	CPUNanos uint64
}

// unlimitedV1 is the smallest memory.limit_in_bytes value that means "no cap"
// (the kernel reports PAGE_COUNTER_MAX pages, rounded; anything this large is
// unlimited in practice).
const unlimitedV1 = 1 << 62

// Stats reads the group's counters.
func (g *Group) Stats() (Stats, error) {
	if g.h.Mode == V2 {
		return g.statsV2()
	}
	var s Stats
	var err error
	mem := g.dirs["memory"]
	if s.MemoryBytes, err = readUint(mem, "memory.usage_in_bytes"); err != nil {
		return s, err
	}
	if s.MemoryLimitBytes, err = readUint(mem, "memory.limit_in_bytes"); err != nil {
		return s, err
	}
	if s.MemoryLimitBytes >= unlimitedV1 {
		s.MemoryLimitBytes = 0
	}
	if s.MemoryPeakBytes, err = readUint(mem, "memory.max_usage_in_bytes"); err != nil {
		return s, err
	}
	if s.MemoryCacheBytes, err = readStat(mem, "memory.stat", "cache"); err != nil {
		return s, err
	}
	if s.Pids, err = readUint(g.dirs["pids"], "pids.current"); err != nil {
		return s, err
	}
	if d := g.dirs["cpuacct"]; d != "" {
		if s.CPUNanos, err = readUint(d, "cpuacct.usage"); err != nil {
			return s, err
		}
	}
	return s, nil
}

func (g *Group) statsV2() (Stats, error) {
	var s Stats
	var err error
	d := g.dirs[""]
	if s.MemoryBytes, err = readUint(d, "memory.current"); err != nil {
		return s, err
	}
	if s.MemoryLimitBytes, err = readUint(d, "memory.max"); err != nil {
		return s, err
	}
	if exists(d, "memory.peak") {
		if s.MemoryPeakBytes, err = readUint(d, "memory.peak"); err != nil {
			return s, err
		}
	}
	if s.MemoryCacheBytes, err = readStat(d, "memory.stat", "file"); err != nil {
		return s, err
	}
	if s.Pids, err = readUint(d, "pids.current"); err != nil {
		return s, err
	}
	b, err := os.ReadFile(filepath.Join(d, "cpu.stat"))
	if err != nil {
		return s, notFound(d, err)
	}
	usec, err := ParseCPUStatUsage(b)
	if err != nil {
		return s, fmt.Errorf("cgroup: %s/cpu.stat: %w", d, err)
	}
	s.CPUNanos = usec * 1000
	return s, nil
}

// ParseCPUStatUsage returns usage_usec from a v2 cpu.stat file.
func ParseCPUStatUsage(b []byte) (uint64, error) {
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == "usage_usec" {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("no usage_usec line")
}

// readStat reads the value of key from a "key value" per line file of dir
// (memory.stat).
func readStat(dir, file, key string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0, notFound(dir, err)
	}
	v, err := ParseStatValue(b, key)
	if err != nil {
		return 0, fmt.Errorf("cgroup: %s/%s: %w", dir, file, err)
	}
	return v, nil
}

// ParseStatValue returns the value of key in a "key value" per line file
// (memory.stat, cpu.stat).
func ParseStatValue(b []byte, key string) (uint64, error) {
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s line", key)
}

// ParseUintOrMax parses a single-value cgroup file; "max" reads as 0
// (unlimited).
func ParseUintOrMax(b []byte) (uint64, error) {
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	return strconv.ParseUint(s, 10, 64)
}

func readUint(dir, file string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0, notFound(dir, err)
	}
	v, err := ParseUintOrMax(b)
	if err != nil {
		return 0, fmt.Errorf("cgroup: %s/%s: %w", dir, file, err)
	}
	return v, nil
}

// notFound classifies a missing group as NotFound.
func notFound(dir string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cgroup %s: %w", dir, errdefs.ErrNotFound)
	}
	return err
}
