package ns

// The guest daemon's reserve. The daemon and every process it starts share
// the sandbox's cgroup and its caps; without more, a workload that takes all
// of the sandbox's tasks or memory takes them from the daemon too, and the
// host can no longer reach into the sandbox to stop it. On a cgroup v1 host
// the workload runs one level down, in a child group of the sandbox's memory
// and pids hierarchies capped below the sandbox's own limits by the
// daemon's reserve (WorkloadLimits); the daemon stays in the sandbox's group
// and keeps the difference. The other hierarchies (freezer, cpu, …) hold the
// workload in the sandbox's group as before, so pausing, killing and
// accounting the sandbox reach every task, and the child goes with the
// sandbox's group.
//
// The daemon starts each process in the child: one thread of it, moved
// once into the child's tasks files and kept there, forks every process
// (guestd.Config.WorkloadTasks), through files this driver opens and passes
// down. A sandbox that misuses them can only move its own tasks between its
// own two groups, both within its limits.
//
// On a cgroup v2 host there is no such child yet (a v2 group with children
// holds no tasks, so the daemon would need a leaf of its own): the daemon
// shares the sandbox's caps, as docs/SECURITY.md C-1 says.

import (
	"fmt"
	"os"

	"github.com/spacesandbox/space/internal/cgroup"
)

// workloadGroup is the name of the workload's child group.
const workloadGroup = "workload"

// reserveControllers are the hierarchies the workload's child group is in.
var reserveControllers = []string{"memory", "pids"}

const (
	// reservePids is the number of tasks the daemon keeps for itself: its
	// Go runtime's threads (about a dozen) and room to make more.
	reservePids = 32
	// The memory the daemon keeps for itself is an eighth of the
	// sandbox's, within these bounds: its heap and buffers take about
	// 10 MiB.
	minReserveMemoryBytes = 16 << 20
	maxReserveMemoryBytes = 32 << 20
)

// WorkloadLimits are the workload's caps within a sandbox whose caps are
// memBytes and pids: each less the daemon's reserve, and never less than
// half of the sandbox's (a sandbox too small for the reserve splits it).
func WorkloadLimits(memBytes int64, pids int) (workloadMemBytes int64, workloadPids int) {
	reserve := min(max(memBytes/8, minReserveMemoryBytes), maxReserveMemoryBytes)
	return max(memBytes-reserve, memBytes/2), max(pids-reservePids, pids/2)
}

// workloadTasks makes the workload's child group of g with the sandbox's
// limits l and opens the tasks files the daemon moves its forking thread
// through: the child's, then the sandbox group's, one per controller of
// reserveControllers. Nil files and a nil error: the host's cgroups are v2,
// the workload stays in g.
func (d *Driver) workloadTasks(g *cgroup.Group, l cgroup.Limits) (into, back []*os.File, err error) {
	if d.hier.Mode == cgroup.V2 {
		return nil, nil, nil
	}
	if l.PidsMax == 0 {
		l.PidsMax = cgroup.DefaultPidsMax
	}
	w, err := g.Child(workloadGroup, reserveControllers...)
	if err != nil {
		return nil, nil, err
	}
	mem, pids := WorkloadLimits(l.MemoryBytes, l.PidsMax)
	if err := w.Create(cgroup.Limits{MemoryBytes: mem, PidsMax: pids}); err != nil {
		return nil, nil, fmt.Errorf("ns: the workload's cgroup: %w", err)
	}
	if into, err = w.TaskFiles(reserveControllers...); err != nil {
		return nil, nil, err
	}
	if back, err = g.TaskFiles(reserveControllers...); err != nil {
		closeFiles(into)
		return nil, nil, err
	}
	return into, back, nil
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// fdsOf returns the descriptors of files.
func fdsOf(files []*os.File) []int {
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	return fds
}
