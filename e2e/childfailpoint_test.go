package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/failpoint"
)

// TestBridgeAndGuestFailpoints kills the host bridge or the guest daemon at
// every failpoint of theirs in internal/failpoint's registry — each step of
// an execution's start (the guest up, Ready answered, Init installed, Init
// admitted), of an exec (admitted, process started, process ended, answer
// forwarded) and of a file transfer (admitted, file written, answer
// forwarded), not a sample — by arming the point in a server's environment
// (the node hands it to every bridge it spawns, the node-manager to every
// guest it starts) and running the step. The server lives on: the node
// notices the death, a start so cut answers 409 with the reason and leaves
// the sandbox failed with it, a running sandbox so cut is recovered from its
// own disk at a newer generation keeping what was acknowledged (the file
// written before, and the exec's or upload's own write when it was
// answered; a vm one from its latest snapshot, taken after the file), no answer is a 500 or a hang, and the host holds nothing of
// the platform afterwards it did not hold before.
func TestBridgeAndGuestFailpoints(t *testing.T) {
	dir := newDataDir(t)
	before := inventory(dir)
	run := func(p *failpoint.Point, runtime string) {
		t.Run(runtime+"/"+p.Name, func(t *testing.T) {
			ids := killChildAtFailpoint(t, dir, p, runtime)
			checkInventory(t, before, dir, ids...)
		})
	}
	n := 0
	for _, p := range childPoints() {
		if p.Runtime == "" {
			run(p, "ns")
			n++
		}
	}
	if n < 11 {
		t.Errorf("%d bridge and guest points run on ns, want all of them", n)
	}
	// Every other start passes the start points too: a restore, a start
	// after stop, a rollback, a fork's child.
	for _, op := range []string{"restore", "start", "rollback", "fork"} {
		for _, p := range childPoints() {
			if p.Runtime == "" && p.Op == "create" {
				t.Run("ns/"+op+"/"+p.Name, func(t *testing.T) {
					ids := killChildAtStart(t, dir, p, op)
					checkInventory(t, before, dir, ids...)
				})
			}
		}
	}
	// The vm runtime (its guest freeze too), on request: minutes under TCG.
	if os.Getenv("SPACE_TEST_FAILPOINTS_VM") == "" {
		return
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("SPACE_TEST_FAILPOINTS_VM: QEMU is not installed (make test installs qemu-system-x86)")
	}
	for _, p := range childPoints() {
		run(p, "vm")
	}
}

// childPoints are the registry's points of the host bridge and the guest.
func childPoints() []*failpoint.Point {
	var out []*failpoint.Point
	for _, p := range failpoint.All() {
		if p.Process == failpoint.Bridge || p.Process == failpoint.Guest {
			out = append(out, p)
		}
	}
	return out
}

// lateFile is written by the request the point cuts: kept if that request
// was answered.
const lateFile = "/home/user/late"

// killChildAtFailpoint runs p's step on a server whose bridges and guests
// are armed with p, checks what the death left, deletes everything and
// stops the server; it returns the sandboxes it made.
func killChildAtFailpoint(t *testing.T, dir string, p *failpoint.Point, runtime string) []string {
	spec := p.Name + "=exit"
	if p == failpoint.GuestAfterWrite || p.Op == "snapshot" {
		// The first upload every guest takes is the sandbox's CA, which
		// its start installs; the second is the test's. The first disk
		// snapshot is the one a recovery starts from; the second dies.
		spec += "@2"
	}
	in := startServerEnv(t, dir, []string{failpoint.EnvVar + "=" + spec})
	var ids []string
	switch p.Op {
	case "create":
		// Every start on this server dies at the point: the create is
		// refused with the reason, and the sandbox is failed with it.
		var sb struct {
			sandbox
			Message string `json:"message"`
		}
		t0 := time.Now()
		code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "minimal", "runtime": runtime, "memory_mib": 256}, &sb)
		t.Logf("create: HTTP %d %q after %s", code, sb.Message, time.Since(t0).Round(time.Millisecond))
		if code != http.StatusConflict || sb.Message == "" {
			t.Errorf("create with the %s killed at %s: HTTP %d %q, want 409 with the reason", p.Process, p.Name, code, sb.Message)
		}
		var list struct{ Sandboxes []sandbox }
		in.do("GET", "/v1/sandboxes", nil, &list)
		for _, s := range list.Sandboxes {
			ids = append(ids, s.ID)
			if s.State != "failed" || s.Reason == "" {
				t.Errorf("sandbox %s after its start was killed: %+v, want failed with the reason", s.ID, s)
			}
		}
		if len(ids) != 1 {
			t.Errorf("sandboxes after the create: %+v, want the one", list.Sandboxes)
		}
	case "exec", "files":
		sb := in.createWith("minimal", runtime)
		ids = append(ids, sb.ID)
		// What was acknowledged before the kill goes by the other kind of
		// request than the one the point is on (the point is armed in every
		// execution, the recovered one too).
		if p.Op == "exec" {
			if code := in.putFile(sb.ID, ackFile, "acknowledged\n"); code/100 != 2 {
				t.Fatalf("write %s: HTTP %d", ackFile, code)
			}
		} else {
			in.exec(sb.ID, "sh", "-c", "echo acknowledged > "+ackFile)
		}
		if runtime == "vm" {
			// A vm execution that dies is recovered from its latest
			// snapshot (what its guest wrote since is lost, by design).
			var snap snapshotJSON
			if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", map[string]string{"kind": "disk"}, &snap); code != http.StatusCreated {
				t.Fatalf("the disk snapshot a vm recovers from: HTTP %d %+v", code, snap)
			}
		}
		var code int
		var answer string
		if p.Op == "exec" {
			var res struct {
				execResult
				Message string `json:"message"`
			}
			code = in.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"sh", "-c", "echo late > " + lateFile}}, &res)
			answer = res.Message + res.Stderr
			if code == http.StatusOK && res.ExitCode != 0 {
				code = -code // answered, but not a success: nothing acknowledged
			}
		} else {
			code, answer = in.raw("PUT", "/v1/sandboxes/"+sb.ID+"/files?path="+lateFile, "late\n")
		}
		acked := code/100 == 2
		t.Logf("%s: HTTP %d %q", p.Op, code, answer)
		if (p == failpoint.BridgeAfterExec || p == failpoint.BridgeAfterFiles) && !acked {
			// The whole answer was through: answering "retry" would run
			// the command (or the write) twice.
			t.Errorf("%s with the bridge killed once its answer was forwarded: HTTP %d %q, want the answer", p.Op, code, answer)
		}
		if code >= 500 && code != http.StatusBadGateway && code != http.StatusServiceUnavailable && code != http.StatusGatewayTimeout {
			t.Errorf("%s with the %s killed at %s: HTTP %d, want a success or a classed error", p.Op, p.Process, p.Name, code)
		}
		// The node notices: the execution is recovered from its disk.
		got := in.recoveredAfter(sb)
		t.Logf("%s: sandbox %s %s at generation %d (was %d) %s", p.Name, sb.ID, got.State, got.Generation, sb.Generation, got.Reason)
		if got.State != "running" || got.Generation <= sb.Generation {
			t.Fatalf("after the %s was killed at %s: %+v, want running at a newer generation than %d\n%s", p.Process, p.Name, got, sb.Generation, in.logs())
		}
		want := map[string]string{ackFile: "acknowledged\n"}
		if acked && runtime == "ns" {
			want[lateFile] = "late\n"
		}
		for path, content := range want {
			var have string
			if p.Op == "exec" {
				var c int
				c, have = in.getFile(sb.ID, path)
				if c != http.StatusOK {
					have = "HTTP " + http.StatusText(c)
				}
			} else {
				have = in.exec(sb.ID, "sh", "-c", "cat "+path+" 2>&1").Stdout
			}
			if have != content {
				t.Errorf("after the %s was killed at %s: %s is %q, want %q (acknowledged)", p.Process, p.Name, path, have, content)
			}
		}
	case "snapshot":
		// A vm disk snapshot freezes the guest's filesystem through the
		// bridge: killed there, the execution is recovered from the
		// snapshot before (a vm one from its latest snapshot), with what
		// was acknowledged before it.
		sb := in.createWith("minimal", runtime)
		ids = append(ids, sb.ID)
		in.exec(sb.ID, "sh", "-c", "echo acknowledged > "+ackFile)
		var first snapshotJSON
		if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", map[string]string{"kind": "disk"}, &first); code != http.StatusCreated {
			t.Fatalf("the first disk snapshot: HTTP %d %+v", code, first)
		}
		var second snapshotJSON
		code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", map[string]string{"kind": "disk"}, &second)
		t.Logf("snapshot: HTTP %d %q", code, second.Message)
		if code >= 500 && code != http.StatusBadGateway && code != http.StatusServiceUnavailable && code != http.StatusGatewayTimeout {
			t.Errorf("snapshot with the %s killed at %s: HTTP %d %q, want a success or a classed error", p.Process, p.Name, code, second.Message)
		}
		got := in.recoveredAfter(sb)
		t.Logf("%s: sandbox %s %s at generation %d (was %d) %s", p.Name, sb.ID, got.State, got.Generation, sb.Generation, got.Reason)
		if got.State != "running" || got.Generation <= sb.Generation {
			t.Fatalf("after the %s was killed at %s: %+v, want running at a newer generation than %d\n%s", p.Process, p.Name, got, sb.Generation, in.logs())
		}
		in.wantAck(sb.ID, p.Name)
		for _, s := range in.settleSnapshots(sb.ID) {
			if s.State == "failed" && s.Reason == "" {
				t.Errorf("snapshot %s failed without a reason", s.ID)
			}
		}
	default:
		t.Fatalf("failpoint %s: this test does not know how to drive operation %q; add it", p.Name, p.Op)
	}
	in.wantFired(p)
	for _, id := range ids {
		in.do("DELETE", "/v1/sandboxes/"+id, nil, nil)
		in.waitGone(id)
	}
	in.waitNoVolumes(ids)
	in.stop()
	return ids
}

// recoveredAfter waits until sandbox sb, whose execution was killed, runs
// at a newer generation, rests, or is failed (with a reason); it returns
// what it found then (the last state seen after 2 minutes).
func (in *instance) recoveredAfter(sb sandbox) sandbox {
	in.t.Helper()
	var got sandbox
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got)
		switch {
		case got.State == "running" && got.Generation > sb.Generation,
			got.State == "failed", got.State == "stopped", got.State == "paused", got.State == "hibernated":
			return got
		}
	}
	return got
}

// wantFired checks that the point's process died there: its line is in the
// server's log (a guest's stderr is the node-manager's, which is the
// server's) or in a host bridge's log.
func (in *instance) wantFired(p *failpoint.Point) {
	in.t.Helper()
	line := "failpoint " + p.Name + ": exit 137"
	if strings.Contains(in.logs(), line) {
		return
	}
	// The node logs a bridge's exit with the tail of its log, when its
	// directory is still there, and its status (137 without a signal:
	// the failpoint's exit).
	// The node-manager logs a guest daemon's own exit (an ns guest's
	// stderr is nobody's; a vm guest's is its console, whose tail the line
	// carries, with the point's line).
	exited := map[failpoint.Process]string{failpoint.Bridge: `msg="host bridge exited"`, failpoint.Guest: `msg="sandbox guest daemon exited"`}[p.Process]
	if logs := in.logs(); strings.Contains(logs, exited) && strings.Contains(logs, `status="exit status 137"`) {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(in.dataDir, "node", "execs", "*", "*.log"))
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil && bytes.Contains(b, []byte(line)) {
			return
		}
	}
	in.t.Errorf("no %s died at %s (%q is in no log)\n%s", p.Process, p.Name, line, in.logs())
}

// putFile writes content to path in sandbox id through the files API and
// returns the HTTP status.
func (in *instance) putFile(id, path, content string) int {
	in.t.Helper()
	code, _ := in.raw("PUT", "/v1/sandboxes/"+id+"/files?path="+path, content)
	return code
}

// getFile reads path in sandbox id through the files API.
func (in *instance) getFile(id, path string) (int, string) {
	in.t.Helper()
	return in.raw("GET", "/v1/sandboxes/"+id+"/files?path="+path, "")
}

// raw sends a request with a raw body and returns the status and the raw
// answer; no answer within two minutes fails the test as a hang.
func (in *instance) raw(method, path, body string) (int, string) {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, in.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+in.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		in.t.Fatalf("%s %s: %v (a hang)\n%s", method, path, err, in.logs())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// killChildAtStart is killChildAtFailpoint's start points (p) on the
// start of operation op — restore, start (after stop), rollback or fork —
// prepared on an unarmed server (a sandbox hibernated, stopped, or with a
// disk snapshot) and run on one whose bridges and guests are armed with p.
// A restore, start or rollback so cut answers 409 with the reason and the
// sandbox is failed with it, but what it acknowledged is not lost: its
// snapshot is kept, and on an unarmed server a rollback to it runs the
// sandbox again with it. A fork so cut leaves its parent running with its
// data and the child, if recorded, failed with the reason.
func killChildAtStart(t *testing.T, dir string, p *failpoint.Point, op string) []string {
	in := startServer(t, dir)
	in.waitTemplate("minimal")
	sb := in.createWith("minimal", "ns")
	ids := []string{sb.ID}
	in.exec(sb.ID, "sh", "-c", "echo acknowledged > "+ackFile)
	var body string
	switch op {
	case "restore", "start":
		prep, want := "hibernate", "hibernated"
		if op == "start" {
			prep, want = "stop", "stopped"
		}
		in.mustDo("POST", "/v1/sandboxes/"+sb.ID+"/"+prep, "")
		if got := in.settle(sb.ID, prep); got.State != want {
			t.Fatalf("%s before the %s: %+v\n%s", prep, op, got, in.logs())
		}
	case "rollback":
		var snap snapshotJSON
		if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", map[string]string{"kind": "disk"}, &snap); code != http.StatusCreated {
			t.Fatalf("the snapshot to roll back to: HTTP %d %+v", code, snap)
		}
		body = `{"snapshot":"` + snap.ID + `"}`
	}
	in.stop()

	in = startServerEnv(t, dir, []string{failpoint.EnvVar + "=" + p.Name + "=exit"})
	var e struct{ Message string }
	code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/"+op, jsonBody(body), &e)
	if op == "fork" {
		t.Logf("fork: HTTP %d %q", code, e.Message)
		if code >= 500 {
			t.Errorf("fork with the %s killed at %s: HTTP %d %q, want a success or a classed error", p.Process, p.Name, code, e.Message)
		}
		in.wantRunning(sb.ID, "the fork's parent")
		var list struct{ Sandboxes []sandbox }
		in.do("GET", "/v1/sandboxes", nil, &list)
		for _, child := range list.Sandboxes {
			if child.ID == sb.ID {
				continue
			}
			ids = append(ids, child.ID)
			if got := in.settle(child.ID, "fork child"); got.State != "failed" || got.Reason == "" {
				t.Errorf("fork child %s whose start was killed at %s: %+v, want failed with the reason", child.ID, p.Name, got)
			}
		}
		in.wantFired(p)
	} else {
		if code != http.StatusConflict || e.Message == "" {
			t.Errorf("%s with the %s killed at %s: HTTP %d %q, want 409 with the reason", op, p.Process, p.Name, code, e.Message)
		}
		if got := in.settle(sb.ID, op); got.State != "failed" || got.Reason == "" {
			t.Errorf("sandbox after its %s was killed at %s: %+v, want failed with the reason", op, p.Name, got)
		}
		var snap string
		for _, s := range in.settleSnapshots(sb.ID) {
			if s.State == "ready" {
				snap = s.ID
			}
		}
		if snap == "" {
			t.Fatalf("the failed %s left sandbox %s no ready snapshot: what it acknowledged is lost\n%s", op, sb.ID, in.logs())
		}
		in.wantFired(p)
		in.stop()
		in = startServer(t, dir)
		in.mustDo("POST", "/v1/sandboxes/"+sb.ID+"/rollback", `{"snapshot":"`+snap+`"}`)
		in.wantRunning(sb.ID, "rollback after the failed "+op)
	}
	for _, id := range ids {
		in.do("DELETE", "/v1/sandboxes/"+id, nil, nil)
		in.waitGone(id)
	}
	in.waitNoObjects(fileStore)
	in.waitNoVolumes(ids)
	in.stop()
	return ids
}
