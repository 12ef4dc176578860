package node

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/privop"
)

// TestSpawnedBridgeLimits: the host bridge the node starts for an
// execution runs with RLIMIT_NOFILE BridgeMaxFiles, soft and hard, whatever
// the node's own limit: one sandbox's streams cannot take the node's fd
// table through its bridge. Its memory is bound likewise (catalogue A-2):
// RLIMIT_DATA BridgeMaxData, soft and hard, the hard bound, and
// GOMEMLIMIT BridgeMemoryLimit, the heap its collector keeps under.
func TestSpawnedBridgeLimits(t *testing.T) {
	dir := t.TempDir()
	// A stand-in bridge that ignores its arguments and waits.
	fake := filepath.Join(dir, "space-host-bridge")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nexec sleep 60\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(Config{NodeID: "node-a", DataDir: dir, Privileged: privop.NewClient("/nonexistent"), HostBridge: fake},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	rec := &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g1-x", SandboxID: "sb1", Generation: 1, Runtime: "ns"}}
	saveRecord(t, m, rec)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := m.spawnBridge(rec, w); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(rec.BridgePid, syscall.SIGKILL) })
	limits, err := os.ReadFile("/proc/" + strconv.Itoa(rec.BridgePid) + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct {
		name string
		want int
	}{{"Max open files", BridgeMaxFiles}, {"Max data size", BridgeMaxData}} {
		got := regexp.MustCompile(l.name + `\s+(\d+)\s+(\d+)`).FindStringSubmatch(string(limits))
		want := strconv.Itoa(l.want)
		if got == nil || got[1] != want || got[2] != want {
			t.Errorf("bridge pid %d %q limit %q, want %s soft and hard:\n%s", rec.BridgePid, l.name, got, want, limits)
		}
	}
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(rec.BridgePid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if want := "GOMEMLIMIT=" + strconv.Itoa(BridgeMemoryLimit); !strings.Contains("\x00"+string(environ)+"\x00", "\x00"+want+"\x00") {
		t.Errorf("bridge pid %d environment %q, want %s", rec.BridgePid, strings.ReplaceAll(string(environ), "\x00", " "), want)
	}
}
