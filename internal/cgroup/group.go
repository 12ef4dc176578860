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
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// DefaultPidsMax is the task cap when Limits.PidsMax is 0.
const DefaultPidsMax = 1024

// cfsPeriod is the CPU accounting period in microseconds.
const cfsPeriod = 100000

// pollInterval paces the waits on kernel state (freezing, emptying).
const pollInterval = 5 * time.Millisecond

// Limits are the resource caps of one group.
type Limits struct {
	// MemoryBytes caps memory (and memory+swap, so nothing is swapped); 0 means
	// no cap.
	MemoryBytes int64
	// PidsMax caps the number of tasks; 0 means DefaultPidsMax.
	PidsMax int
	// CPUs caps CPU time at this many CPUs and weighs the group as that many
	// host tasks under contention (cpu.shares, cpu.weight); 0 means no cap
	// and the default weight.
	CPUs int
}

// Group is one execution's control group: a set of directories, one per
// hierarchy in use. Its zero value is not usable; get one from
// Hierarchy.Group.
type Group struct {
	h *Hierarchy
	// dirs maps a controller (v1) or "" (v2) to the group's directory.
	dirs map[string]string
}

// validName accepts the parent and group names used here.
func validName(s string) error {
	if s == "" || len(s) > 128 || s == "." || s == ".." {
		return fmt.Errorf("%w: cgroup name %q", errdefs.ErrInvalidArgument, s)
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%w: cgroup name %q: only a-z, 0-9, -, _ and . are allowed", errdefs.ErrInvalidArgument, s)
		}
	}
	return nil
}

// Group returns the group parent/name. It creates nothing.
func (h *Hierarchy) Group(parent, name string) (*Group, error) {
	if err := validName(parent); err != nil {
		return nil, err
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	g := &Group{h: h, dirs: map[string]string{}}
	if h.Mode == V2 {
		g.dirs[""] = filepath.Join(h.V2, parent, name)
		return g, nil
	}
	for ctrl, mnt := range h.V1 {
		g.dirs[ctrl] = filepath.Join(mnt, parent, name)
	}
	return g, nil
}

// OwnCPUGroup returns the group parent/name, as Group does, except that on
// cgroup v1 its directory in the cpu hierarchy is the top-level group
// "parent.name" instead of one below parent. It creates nothing.
//
// The CPU scheduler bills the time of a group's tasks to every group above
// it. Groups below one shared parent are scheduled as one entity of the
// parent's weight against the rest of the host: while one of them runs
// flat out, the parent has used its share, and a sibling that wakes for a
// millisecond of work waits until the parent is due again: on a host
// loaded by other work, beside a spinning sandbox, a quiet ns sandbox's p99
// exec latency was a median 2.6 times its idle figure below one parent and
// 0.56 times as a group of its own (docs/PERFORMANCE.md, 2026-12-07).
// A top-level group is an entity of its own, as a host process is: it
// waits only for its own use. Its limits hold as before (the cfs quota and
// cpu.shares are its own); what it gives up is the parent's cap on what
// all its siblings weigh together.
//
// Controllers mounted with cpu in one hierarchy (cpu,cpuacct) have their
// directory there too: a task is in one group per hierarchy. On cgroup v2,
// where every controller shares one tree, it is Group.
func (h *Hierarchy) OwnCPUGroup(parent, name string) (*Group, error) {
	g, err := h.Group(parent, name)
	if err != nil || h.Mode == V2 {
		return g, err
	}
	cpu, ok := h.V1["cpu"]
	if !ok {
		return g, nil
	}
	for ctrl, mnt := range h.V1 {
		if mnt == cpu {
			g.dirs[ctrl] = filepath.Join(mnt, parent+"."+name)
		}
	}
	return g, nil
}

// Dirs returns the group's directories, sorted and without duplicates
// (co-mounted v1 controllers share one).
func (g *Group) Dirs() []string {
	var out []string
	for _, d := range g.dirs {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

// Exists reports whether any of the group's directories exists.
func (g *Group) Exists() bool {
	for _, d := range g.Dirs() {
		if _, err := os.Stat(d); err == nil {
			return true
		}
	}
	return false
}

// Create makes the group in every hierarchy and applies the limits. It fails
// with Conflict if the group already exists.
func (g *Group) Create(l Limits) error {
	if l.MemoryBytes < 0 || l.PidsMax < 0 || l.CPUs < 0 {
		return fmt.Errorf("%w: cgroup limits %+v: negative", errdefs.ErrInvalidArgument, l)
	}
	if l.PidsMax == 0 {
		l.PidsMax = DefaultPidsMax
	}
	if g.h.Mode == V2 {
		if err := g.enableV2Controllers(); err != nil {
			return err
		}
	}
	for _, d := range g.Dirs() {
		if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
			return fmt.Errorf("cgroup: create parent %s: %w", filepath.Dir(d), err)
		}
		if err := os.Mkdir(d, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("cgroup %s: %w: already exists", d, errdefs.ErrConflict)
			}
			return fmt.Errorf("cgroup: create %s: %w", d, err)
		}
	}
	if g.h.Mode == V2 {
		return g.limitV2(l)
	}
	return g.limitV1(l)
}

func (g *Group) limitV1(l Limits) error {
	if l.MemoryBytes > 0 && g.dirs["memory"] != "" {
		mem := strconv.FormatInt(l.MemoryBytes, 10)
		if err := write(g.dirs["memory"], "memory.limit_in_bytes", mem); err != nil {
			return err
		}
		// memsw exists only when the kernel accounts swap; set it equal to the
		// memory cap so that nothing is swapped out instead of OOM-killed.
		if exists(g.dirs["memory"], "memory.memsw.limit_in_bytes") {
			if err := write(g.dirs["memory"], "memory.memsw.limit_in_bytes", mem); err != nil {
				return err
			}
		}
	}
	if pids := g.dirs["pids"]; pids != "" {
		if err := write(pids, "pids.max", strconv.Itoa(l.PidsMax)); err != nil {
			return err
		}
	}
	if cpu := g.dirs["cpu"]; l.CPUs > 0 && cpu != "" {
		if err := write(cpu, "cpu.cfs_period_us", strconv.Itoa(cfsPeriod)); err != nil {
			return err
		}
		if err := write(cpu, "cpu.cfs_quota_us", strconv.Itoa(l.CPUs*cfsPeriod)); err != nil {
			return err
		}
		if err := write(cpu, "cpu.shares", strconv.Itoa(cpuSharesV1(l.CPUs))); err != nil {
			return err
		}
	}
	return nil
}

// The CPU weight of a group of n CPUs is n times a host task's: under
// contention a group of 4 CPUs gets four times the time of a group of 1.
// cpuSharesV1 is v1's cpu.shares (a nice-0 task weighs 1024), cpuWeightV2
// is v2's cpu.weight (100 for a nice-0 task, at most 10000).
func cpuSharesV1(n int) int { return n * 1024 }
func cpuWeightV2(n int) int { return min(n*100, 10000) }

func (g *Group) enableV2Controllers() error {
	dir := g.dirs[""]
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("cgroup: create parent %s: %w", parent, err)
	}
	for _, d := range []string{g.h.V2, parent} {
		for _, c := range []string{"memory", "pids", "cpu"} {
			if err := write(d, "cgroup.subtree_control", "+"+c); err != nil && c != "cpu" {
				return fmt.Errorf("cgroup: enable the %s controller (is it delegated to %s?): %w", c, d, err)
			}
		}
	}
	return nil
}

func (g *Group) limitV2(l Limits) error {
	dir := g.dirs[""]
	if l.MemoryBytes > 0 {
		if err := write(dir, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
			return err
		}
		if exists(dir, "memory.swap.max") {
			if err := write(dir, "memory.swap.max", "0"); err != nil {
				return err
			}
		}
	}
	if err := write(dir, "pids.max", strconv.Itoa(l.PidsMax)); err != nil {
		return err
	}
	if l.CPUs > 0 && exists(dir, "cpu.max") {
		if err := write(dir, "cpu.max", fmt.Sprintf("%d %d", l.CPUs*cfsPeriod, cfsPeriod)); err != nil {
			return err
		}
		return write(dir, "cpu.weight", strconv.Itoa(cpuWeightV2(l.CPUs)))
	}
	return nil
}

// Child returns the group name below g in the given v1 controllers' hierarchies
// only (a task outside them stays in g there: a child in the memory and pids
// hierarchies caps a part of g's tasks while g's freezer still holds them
// all, so Freeze and Kill of g reach them). It creates nothing; Create makes
// it, within g's limits, and g's Delete removes it. Child is for v1
// hierarchies: on v2 it fails with ErrNotSupported (a v2 group with children
// holds no tasks of its own).
func (g *Group) Child(name string, controllers ...string) (*Group, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if g.h.Mode == V2 {
		return nil, fmt.Errorf("cgroup: a child group of %s: %w on cgroup v2", g.primary(), errdefs.ErrFailedPrecondition)
	}
	c := &Group{h: g.h, dirs: map[string]string{}}
	for _, ctrl := range controllers {
		d, ok := g.dirs[ctrl]
		if !ok {
			return nil, fmt.Errorf("cgroup: a child group of %s: %w: no %s hierarchy", g.primary(), errdefs.ErrFailedPrecondition, ctrl)
		}
		c.dirs[ctrl] = filepath.Join(d, name)
	}
	return c, nil
}

// TaskFiles opens, write-only, the tasks file of the group's directory in
// each of the given v1 controllers' hierarchies: writing a thread id to all
// of them moves that one thread into the group there (a process it forks is
// then born there). The caller closes them.
func (g *Group) TaskFiles(controllers ...string) ([]*os.File, error) {
	if g.h.Mode == V2 {
		return nil, fmt.Errorf("cgroup: tasks files of %s: %w on cgroup v2", g.primary(), errdefs.ErrFailedPrecondition)
	}
	var files []*os.File
	for _, ctrl := range controllers {
		d, ok := g.dirs[ctrl]
		if !ok {
			return nil, fmt.Errorf("cgroup: tasks files of %s: %w: no %s hierarchy", g.primary(), errdefs.ErrFailedPrecondition, ctrl)
		}
		f, err := os.OpenFile(filepath.Join(d, "tasks"), os.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("cgroup: open %s/tasks: %w", d, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// AddProc moves pid (and, in v2 and v1 alike, its future children) into the
// group in every hierarchy.
func (g *Group) AddProc(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("%w: pid %d", errdefs.ErrInvalidArgument, pid)
	}
	for _, d := range g.Dirs() {
		if err := write(d, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// Procs lists the pids in the group (as seen from this process's pid
// namespace).
func (g *Group) Procs() ([]int, error) {
	d := g.primary()
	b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("cgroup %s: %w", d, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup: read %s/cgroup.procs: %w", d, err)
	}
	return ParsePids(b)
}

// primary is the directory whose cgroup.procs is authoritative: v2's group,
// or v1's freezer (the hierarchy Kill works in).
func (g *Group) primary() string {
	if g.h.Mode == V2 {
		return g.dirs[""]
	}
	return g.dirs["freezer"]
}

// ParsePids parses a cgroup.procs file: one decimal pid per line.
func ParsePids(b []byte) ([]int, error) {
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		p, err := strconv.Atoi(f)
		if err != nil || p <= 0 {
			return nil, fmt.Errorf("cgroup.procs: bad pid %q", f)
		}
		pids = append(pids, p)
	}
	return pids, nil
}

// Delete removes the group's directories, its child groups' first (Child),
// waiting (until ctx is done) for the kernel to release groups whose last
// task is still exiting. A group that does not exist is not an error.
func (g *Group) Delete(ctx context.Context) error {
	for _, d := range g.Dirs() {
		if err := removeTree(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// removeTree removes the cgroup directory d and every group below it,
// deepest first.
func removeTree(ctx context.Context, d string) error {
	entries, err := os.ReadDir(d)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cgroup: list %s: %w", d, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(ctx, filepath.Join(d, e.Name())); err != nil {
				return err
			}
		}
	}
	for {
		err := unix.Rmdir(d)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("cgroup: remove %s: %w", d, err)
		}
		if err := sleep(ctx); err != nil {
			return fmt.Errorf("cgroup: remove %s: still has tasks: %w", d, err)
		}
	}
}

func sleep(ctx context.Context) error {
	t := time.NewTimer(pollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func write(dir, file, val string) error {
	p := filepath.Join(dir, file)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("cgroup: open %s: %w", p, err)
	}
	_, werr := f.WriteString(val)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("cgroup: write %q to %s: %w", val, p, werr)
	}
	if cerr != nil {
		return fmt.Errorf("cgroup: write %q to %s: %w", val, p, cerr)
	}
	return nil
}

func exists(dir, file string) bool {
	_, err := os.Stat(filepath.Join(dir, file))
	return err == nil
}
