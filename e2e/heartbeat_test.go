package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHeartbeatHoldsAnIdleSandboxesStatus: the node's heartbeats report an
// idle sandbox's execution from its bridge's held answer, not a status
// round trip every 2 s (space_node_heartbeat_executions_total), and the
// bridge's death is still reported: the sandbox is recovered.
func TestHeartbeatHoldsAnIdleSandboxesStatus(t *testing.T) {
	dir := newDataDir(t)
	in := startServer(t, dir)
	defer in.stop()
	sb := in.create("minimal")
	defer in.delete(sb.ID)
	local := &secondNode{t: t, in: in, dir: dir}
	reported := func() (held, asked float64) {
		_, metrics := local.nodeAPI("GET", "/node/v1/metrics", "")
		return gauge(t, metrics, `space_node_heartbeat_executions_total{status="held"}`),
			gauge(t, metrics, `space_node_heartbeat_executions_total{status="asked"}`)
	}
	held0, asked0 := reported()
	time.Sleep(7 * time.Second) // three heartbeats or more
	held1, asked1 := reported()
	t.Logf("over 7 s: held %v, asked %v", held1-held0, asked1-asked0)
	if held1-held0 < 2 || asked1-asked0 > 1 {
		t.Fatalf("over 7 s the heartbeats held %v and asked %v statuses of one idle sandbox, want at least 2 held and at most 1 asked (the 30 s refresh)",
			held1-held0, asked1-asked0)
	}

	rec := nodeRecord(t, dir, sb.ID, sb.Generation)
	if err := syscall.Kill(rec.BridgePid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the host bridge %d: %v", rec.BridgePid, err)
	}
	var got sandbox
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
		if got.State == "failed" || got.Generation > sb.Generation {
			break
		}
	}
	if got.Generation <= sb.Generation && got.State != "failed" {
		t.Fatalf("after its host bridge was killed the sandbox is %+v, want it recovered or failed\n%s", got, in.logs())
	}
	if out, _, _ := in.cli("", "sandbox", "events", sb.ID); !strings.Contains(out, "host bridge") {
		t.Errorf("the sandbox's events do not name the host bridge:\n%s", out)
	}
}
