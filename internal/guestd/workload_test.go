package guestd

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestWorkloadMemoryMax(t *testing.T) {
	for _, tc := range []struct{ total, want uint64 }{
		{100 << 20, 68 << 20}, // a 128 MiB VM: the 32 MiB reserve
		{1 << 30, 896 << 20},  // 1 GiB: an eighth
		{8 << 30, 7 << 30},    // 8 GiB: an eighth
		{48 << 20, 24 << 20},  // too small for the reserve: half
		{64 << 20, 32 << 20},  // exactly twice the reserve
		{0, 0},
	} {
		if got := workloadMemoryMax(tc.total); got != tc.want {
			t.Errorf("workloadMemoryMax(%d MiB) = %d MiB, want %d MiB", tc.total>>20, got>>20, tc.want>>20)
		}
	}
}

func TestMemTotal(t *testing.T) {
	got, err := memTotal([]byte("MemFree:          1000 kB\nMemTotal:        102400 kB\n"))
	if err != nil || got != 100<<20 {
		t.Errorf("memTotal = %d, %v; want %d", got, err, 100<<20)
	}
	for _, bad := range []string{"", "MemTotal: 12\n", "MemTotal: x kB\n", "MemTotal: 0 kB\n", "MemTotal: 99999999999999999 kB\n", "MemTotal: 10 MB\n"} {
		if n, err := memTotal([]byte(bad)); err == nil {
			t.Errorf("memTotal(%q) = %d, want an error", bad, n)
		}
	}
}

// The forker enters the workload's groups once and forks every process from
// there: moving a thread between v1 groups for each fork takes the kernel's
// global threadgroup lock twice per exec, which waits behind a neighbour's
// fork bomb (catalogue C-4). Regular files stand in for the tasks files.
func TestForkerEntersTheWorkloadOnce(t *testing.T) {
	dir := t.TempDir()
	open := func(name string, flag int) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, name), flag|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	into := []*os.File{open("memory", os.O_WRONLY), open("pids", os.O_WRONLY)}
	back := []*os.File{open("memory-back", os.O_WRONLY), open("pids-back", os.O_WRONLY)}
	d := New(Config{WorkloadTasks: into, DaemonTasks: back}, slog.New(slog.DiscardHandler))
	defer d.Close()

	tids := map[int]bool{}
	for i := range 5 {
		pid, err := d.forkInWorkload(func() (int, error) { tids[unix.Gettid()] = true; return 100 + i, nil })
		if err != nil || pid != 100+i {
			t.Fatalf("fork %d = %d, %v", i, pid, err)
		}
	}
	if len(tids) != 1 {
		t.Errorf("forks ran on threads %v, want one thread", tids)
	}
	for _, name := range []string{"memory", "pids"} {
		got, _ := os.ReadFile(filepath.Join(dir, name))
		for tid := range tids {
			if want := strconv.Itoa(tid); string(got) != want {
				t.Errorf("%s tasks got %q, want the forker's tid %s written once", name, got, want)
			}
		}
	}
	for _, name := range []string{"memory-back", "pids-back"} {
		if got, _ := os.ReadFile(filepath.Join(dir, name)); len(got) != 0 {
			t.Errorf("%s got %q: the forker left the workload", name, got)
		}
	}
}

// A forker that cannot enter every group refuses the fork, takes its thread
// back into the daemon's groups, and tries again at the next fork.
func TestForkerThatCannotEnter(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pids")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	readOnly, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer readOnly.Close()
	back, err := os.Create(filepath.Join(dir, "pids-back"))
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	d := New(Config{WorkloadTasks: []*os.File{readOnly}, DaemonTasks: []*os.File{back}}, slog.New(slog.DiscardHandler))
	defer d.Close()
	forked := 0
	for range 2 {
		if _, err := d.forkInWorkload(func() (int, error) { forked++; return 1, nil }); err == nil || !strings.Contains(err.Error(), "enter the workload's cgroup") {
			t.Errorf("fork = %v, want the workload's cgroup refused", err)
		}
	}
	if forked != 0 {
		t.Errorf("forked %d times outside the workload", forked)
	}
	if got, _ := os.ReadFile(back.Name()); len(strings.Fields(strings.ReplaceAll(string(got), "\n", " "))) == 0 {
		t.Errorf("the daemon's tasks got %q, want the thread taken back", got)
	}
}
