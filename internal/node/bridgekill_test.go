package node

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/privop"
)

// TestBridgeKilledDuringStart: a host bridge killed (SIGKILL) while the
// start waits for its guest makes the start fail at once with the reason,
// not after the ready timeout, and never as a success.
func TestBridgeKilledDuringStart(t *testing.T) {
	testenvSkipWithoutProc(t)
	m, _ := bridgeTestManager(t)
	self, err := driver.ProcStartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// A guest channel whose guest never answers: the bridge stays not ready.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	silent := os.NewFile(uintptr(fds[1]), "silent guest")
	defer silent.Close()
	rec := nsRecord("sb1-g1-killed")
	rec.Runtime, rec.SandboxPid, rec.SandboxStartTime = "vm", os.Getpid(), self
	spawnTestBridge(t, m, rec, os.NewFile(uintptr(fds[0]), "guest channel"))
	bc, err := m.bridge(rec)
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the bridge serves its status (it is up, the guest is not).
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := bc.status(t.Context()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the bridge never served its status")
		}
		time.Sleep(10 * time.Millisecond)
	}
	done := make(chan error, 1)
	const timeout = 2 * time.Minute
	go func() { done <- bc.waitReady(context.Background(), timeout) }()
	if err := syscall.Kill(rec.BridgePid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "exited before it served") {
			t.Fatalf("waitReady with the bridge killed = %v, want the bridge gone", err)
		}
	case <-time.After(timeout / 2):
		t.Fatalf("waitReady still waiting %s after the bridge was killed", timeout/2)
	}
}

// TestFullSnapshotRefusedWithoutBridge: a full snapshot (what hibernate
// takes) of an execution whose host bridge was killed is refused as
// FailedPrecondition with the reason, not handed to the node-manager and
// acknowledged as an image a restore would resume without its bridge.
func TestFullSnapshotRefusedWithoutBridge(t *testing.T) {
	testenvSkipWithoutProc(t)
	m, _ := bridgeTestManager(t)
	rec := nsRecord("sb1-g1-snap")
	spawnTestBridge(t, m, rec, nsChannel(t))
	readyBridge(t, m, rec)
	// With the bridge serving, the snapshot goes on to the node-manager
	// (absent here, so it fails there, not on the bridge check).
	_, err := m.Snapshot(t.Context(), rec.ExecID, nodev1.TakeSnapshot{SnapshotID: "snap-1", Kind: privop.SnapshotFull})
	if err == nil || strings.Contains(err.Error(), "full snapshot refused") {
		t.Fatalf("full snapshot with the bridge serving = %v, want it past the bridge check", err)
	}
	if err := syscall.Kill(rec.BridgePid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); syscall.Kill(rec.BridgePid, 0) == nil; {
		if time.Now().After(deadline) {
			t.Fatal("the killed bridge is still there")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, err = m.Snapshot(t.Context(), rec.ExecID, nodev1.TakeSnapshot{SnapshotID: "snap-2", Kind: privop.SnapshotFull})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "host bridge") {
		t.Fatalf("full snapshot with the bridge killed = %v, want FailedPrecondition naming the host bridge", err)
	}
}
