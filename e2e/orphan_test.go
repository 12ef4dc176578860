package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestExecutionWithRemovedDirectoryStopsItself: an ns sandbox outlives its
// server by design; once its execution directory is removed (the node's data
// deleted), its host bridge stops and closes the guest channel, and the
// sandbox's processes end with it.
func TestExecutionWithRemovedDirectoryStopsItself(t *testing.T) {
	dataDir := t.TempDir()
	var execID string
	// Registered first, run last: after the second server deleted the
	// sandbox and stopped, nothing of the execution is left.
	t.Cleanup(func() {
		if left := leftovers(dataDir, []string{execID}); len(left) > 0 {
			t.Errorf("left behind:\n%s", strings.Join(left, "\n"))
			forceClean(dataDir)
		}
	})
	in := startServer(t, dataDir)
	sb := in.create("minimal")
	if res := in.exec(sb.ID, "sleep", "0"); res.ExitCode != 0 {
		t.Fatalf("exec in %s: %+v", sb.ID, res)
	}
	dirs, _ := filepath.Glob(filepath.Join(dataDir, "node", "execs", "*"))
	var execDir string
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			execDir = d
		}
	}
	if execDir == "" {
		t.Fatalf("no execution directory under %s (%v)", dataDir, dirs)
	}
	execID = filepath.Base(execDir)
	bridge := pidWithCwd(execDir)
	sandboxPids := cgroupPids(filepath.Base(execDir))
	if bridge == 0 || len(sandboxPids) == 0 {
		t.Fatalf("bridge pid %d, sandbox pids %v: want both", bridge, sandboxPids)
	}
	in.stop()
	if err := os.RemoveAll(execDir); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for alive(bridge) || anyAlive(sandboxPids) {
		if time.Now().After(deadline) {
			t.Fatalf("a minute after %s was removed: bridge %d alive %v, sandbox pids %v alive %v", execDir, bridge, alive(bridge), sandboxPids, anyAlive(sandboxPids))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The server, started again, deletes the sandbox the harness leaves
	// and with it the mounts and cgroups the ended execution still has.
	startServer(t, dataDir)
}

// pidWithCwd is the process running in dir (the host bridge), or 0.
func pidWithCwd(dir string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cwd")
	for _, p := range procs {
		if cwd, err := os.Readlink(p); err == nil && cwd == dir {
			pid, _ := strconv.Atoi(strings.Split(p, "/")[2])
			return pid
		}
	}
	return 0
}

// cgroupPids lists the processes in every cgroup named space/<execID>.
func cgroupPids(execID string) []int {
	var pids []int
	for _, root := range []string{"/sys/fs/cgroup/space/" + execID, "/sys/fs/cgroup/*/space/" + execID} {
		tops, _ := filepath.Glob(root)
		for _, top := range tops {
			filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
				if err == nil && d.Name() == "cgroup.procs" {
					b, _ := os.ReadFile(path)
					for _, f := range strings.Fields(string(b)) {
						if pid, err := strconv.Atoi(f); err == nil {
							pids = append(pids, pid)
						}
					}
				}
				return nil
			})
		}
	}
	return pids
}

func alive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

func anyAlive(pids []int) bool {
	for _, p := range pids {
		if alive(p) {
			return true
		}
	}
	return false
}
