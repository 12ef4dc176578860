package node

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
)

// heldRecord is an execution of a sandbox without an idle timeout: its
// report asks its bridge nothing but the status.
func heldRecord(id string) *Record {
	rec := nsRecord(id)
	rec.NoActivity = true
	return rec
}

// reportOne is the heartbeat's report of the only execution on m.
func reportOne(t *testing.T, m *Manager) nodev1.Execution {
	t.Helper()
	execs := m.report(t.Context())
	if len(execs) != 1 {
		t.Fatalf("report = %+v, want one execution", execs)
	}
	return execs[0]
}

// waitBridgeGone kills the bridge of rec and waits until its process is
// reaped (the node that started it waits for it), as it is by the time the
// node is told of the exit. A zombie is not enough: its other threads may
// still be exiting, and its pidfd turns readable only once they are gone.
func waitBridgeGone(t *testing.T, rec *Record) {
	t.Helper()
	if err := syscall.Kill(rec.BridgePid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	reaped := func() bool {
		st, err := driver.ProcStartTime(rec.BridgePid)
		return err != nil || st != rec.BridgeStartTime
	}
	for deadline := time.Now().Add(30 * time.Second); !reaped(); {
		if time.Now().After(deadline) {
			t.Fatal("the killed bridge is still there")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// eachLivenessCheck runs test with the bridge process's liveness told by
// its pidfd, and by /proc (a kernel without pidfd_open).
func eachLivenessCheck(t *testing.T, test func(t *testing.T, pidfd bool)) {
	t.Run("pidfd", func(t *testing.T) { test(t, true) })
	t.Run("proc", func(t *testing.T) {
		pidfdOpen = func(int, int) (int, error) { return -1, unix.ENOSYS }
		defer func() { pidfdOpen = unix.PidfdOpen }()
		test(t, false)
	})
}

// checkPidfd fails t unless bc holds a pidfd exactly when want.
func checkPidfd(t *testing.T, bc *bridgeConn, want bool) {
	t.Helper()
	bc.heldMu.Lock()
	fd := bc.pidfd
	bc.heldMu.Unlock()
	if (fd >= 0) != want {
		t.Fatalf("bridge pidfd = %d, want one: %v", fd, want)
	}
}

// TestReportAsksAnUnchangedBridgeNothing: once a bridge answered that its
// execution runs, the heartbeat's reports of it cost no round trip; when
// the bridge exits, the next report says the execution failed, and why.
func TestReportAsksAnUnchangedBridgeNothing(t *testing.T) {
	testenvSkipWithoutProc(t)
	eachLivenessCheck(t, testReportAsksAnUnchangedBridgeNothing)
}

func testReportAsksAnUnchangedBridgeNothing(t *testing.T, pidfd bool) {
	m, _ := bridgeTestManager(t)
	rec := heldRecord("sb1-g1-held")
	spawnTestBridge(t, m, rec, nsChannel(t))
	bc := readyBridge(t, m, rec)

	if ex := reportOne(t, m); ex.State != nodev1.ExecRunning {
		t.Fatalf("first report = %+v, want running", ex)
	}
	checkPidfd(t, bc, pidfd)
	asked := bc.statusCalls.Load()
	for i := range 5 {
		if ex := reportOne(t, m); ex.State != nodev1.ExecRunning {
			t.Fatalf("report %d = %+v, want running", i, ex)
		}
	}
	if n := bc.statusCalls.Load() - asked; n != 0 {
		t.Fatalf("5 reports of an unchanged execution asked its bridge %d times, want 0", n)
	}
	if held, asked := m.reported.Value(reportHeld), m.reported.Value(reportAsked); held != 5 || asked != 1 {
		t.Fatalf("space_node_heartbeat_executions_total: held %d, asked %d; want 5 and 1", held, asked)
	}
	// The node-API List still observes now.
	if execs := m.List(t.Context()); len(execs) != 1 || execs[0].State != nodev1.ExecRunning {
		t.Fatalf("List = %+v, want the execution running", execs)
	}
	if n := bc.statusCalls.Load() - asked; n != 1 {
		t.Fatalf("List asked the bridge %d times, want 1", n)
	}

	waitBridgeGone(t, rec)
	ex := reportOne(t, m)
	if ex.State != nodev1.ExecFailed || !strings.Contains(ex.Reason, "host bridge") {
		t.Fatalf("report after the bridge exited = %+v, want failed with the host bridge's reason", ex)
	}
	// Stopping the execution lets go of its pidfd (the node-manager's
	// cleanup, absent here, fails after).
	_ = m.Stop(t.Context(), rec.ExecID)
	checkPidfd(t, bc, false)
}

// TestReportAfterPauseAsksAgain: a pause or a resume the node made drops
// the held answer, so the next report asks the bridge; a fence's freeze is
// reported at the next heartbeat.
func TestReportAfterPauseAsksAgain(t *testing.T) {
	testenvSkipWithoutProc(t)
	m, _ := bridgeTestManager(t)
	fp := &fakePauser{paused: map[string]bool{}}
	m.pauser = fp
	rec := heldRecord("sb1-g1-pause")
	spawnTestBridge(t, m, rec, nsChannel(t))
	bc := readyBridge(t, m, rec)
	reportOne(t, m)

	for _, pause := range []bool{true, false} {
		asked := bc.statusCalls.Load()
		if err := m.PauseResume(t.Context(), rec.ExecID, pause); err != nil {
			t.Fatal(err)
		}
		if ex := reportOne(t, m); ex.State != nodev1.ExecRunning {
			t.Fatalf("report after pause=%v = %+v, want running", pause, ex)
		}
		if n := bc.statusCalls.Load() - asked; n != 1 {
			t.Fatalf("the report after pause=%v asked the bridge %d times, want 1", pause, n)
		}
	}

	asked := bc.statusCalls.Load()
	if err := m.fenceOne(t.Context(), rec.ExecID); err != nil {
		t.Fatal(err)
	}
	if !fp.isPaused(rec.ExecID) {
		t.Fatal("the fence did not freeze the execution")
	}
	if ex := reportOne(t, m); !ex.Fenced {
		t.Fatalf("report after the fence froze the execution = %+v, want fenced", ex)
	}
	if n := bc.statusCalls.Load() - asked; n != 1 {
		t.Fatalf("the report after the fence's freeze asked the bridge %d times, want 1", n)
	}
}

// TestReportRefreshCatchesAnUntoldChange: a change the node is not told of
// and the bridge process outlives (here its socket is gone: the bridge is
// unreachable) is reported once the held answer is statusRefresh old.
func TestReportRefreshCatchesAnUntoldChange(t *testing.T) {
	testenvSkipWithoutProc(t)
	m, _ := bridgeTestManager(t)
	m.statusRefresh = time.Hour
	rec := heldRecord("sb1-g1-untold")
	spawnTestBridge(t, m, rec, nsChannel(t))
	bc := readyBridge(t, m, rec)
	reportOne(t, m)

	bc.close()
	if err := os.Remove(m.records.socket(rec.ExecID)); err != nil {
		t.Fatal(err)
	}
	// Held: nothing told the node, and the bridge lives.
	if ex := reportOne(t, m); ex.State != nodev1.ExecRunning {
		t.Fatalf("report within the refresh = %+v, want the held running", ex)
	}
	m.statusRefresh = 20 * time.Millisecond
	time.Sleep(2 * m.statusRefresh)
	ex := reportOne(t, m)
	if ex.State != nodev1.ExecFailed || !strings.Contains(ex.Reason, "host bridge unreachable") {
		t.Fatalf("report after the refresh = %+v, want failed: host bridge unreachable", ex)
	}
	if !driver.ProcAlive(rec.BridgePid, rec.BridgeStartTime) {
		t.Fatal("the bridge exited: the test did not make a change the node is not told of")
	}
}

// TestReportAfterRestartAsksOnceThenHolds: a node that restarted asks each
// bridge it did not start once, then holds the answer; that bridge's exit
// (the node is not its parent, nothing tells it) is reported at the next
// report.
func TestReportAfterRestartAsksOnceThenHolds(t *testing.T) {
	testenvSkipWithoutProc(t)
	eachLivenessCheck(t, testReportAfterRestartAsksOnceThenHolds)
}

func testReportAfterRestartAsksOnceThenHolds(t *testing.T, pidfd bool) {
	m, _ := bridgeTestManager(t)
	rec := heldRecord("sb1-g1-restart")
	spawnTestBridge(t, m, rec, nsChannel(t))
	readyBridge(t, m, rec)

	m2, err := NewManager(m.cfg, m.log)
	if err != nil {
		t.Fatal(err)
	}
	agreeClock(t, m2)
	if ex := reportOne(t, m2); ex.State != nodev1.ExecRunning {
		t.Fatalf("first report after the restart = %+v, want running", ex)
	}
	bc, err := m2.bridge(rec)
	if err != nil {
		t.Fatal(err)
	}
	if n := bc.statusCalls.Load(); n != 1 {
		t.Fatalf("the first report after the restart asked the bridge %d times, want 1", n)
	}
	checkPidfd(t, bc, pidfd)
	reportOne(t, m2)
	if n := bc.statusCalls.Load(); n != 1 {
		t.Fatalf("two reports after the restart asked the bridge %d times, want 1", n)
	}
	waitBridgeGone(t, rec)
	if ex := reportOne(t, m2); ex.State != nodev1.ExecFailed {
		t.Fatalf("report after the adopted bridge exited = %+v, want failed", ex)
	}
}
