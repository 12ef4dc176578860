package node

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/privop"
)

// TestSpawnedBridgeFDLimit: the host bridge the node starts for an
// execution runs with RLIMIT_NOFILE BridgeMaxFiles, soft and hard, whatever
// the node's own limit: one sandbox's streams cannot take the node's fd
// table through its bridge.
func TestSpawnedBridgeFDLimit(t *testing.T) {
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
	got := regexp.MustCompile(`Max open files\s+(\d+)\s+(\d+)`).FindStringSubmatch(string(limits))
	want := strconv.Itoa(BridgeMaxFiles)
	if got == nil || got[1] != want || got[2] != want {
		t.Fatalf("bridge pid %d open-file limit %q, want %s soft and hard:\n%s", rec.BridgePid, got, want, limits)
	}
}
