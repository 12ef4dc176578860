package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKillBridgeOrGuestDuringEachOperation kills -9 an ns execution's host
// bridge, or the guest daemon inside its sandbox, while each lifecycle
// operation is in flight. The operation answers — a success or a classed
// error, never a 500 and never a hang — and the sandbox then either serves
// again (an exec answers), settles in a resting state, or is failed with a
// reason; a hibernated image restores or is refused the same way. At the
// end the host holds nothing of the platform it did not hold before.
func TestKillBridgeOrGuestDuringEachOperation(t *testing.T) {
	dir := newDataDir(t)
	before := inventory(dir)
	in := startServer(t, dir)
	var ids []string
	ops := []struct {
		op, method, path, body string
		from                   string // the state the sandbox is brought to first ("" for none)
	}{
		{"create", "POST", "", `{"template":"minimal","runtime":"ns","memory_mib":256}`, ""},
		{"exec", "POST", "/exec", `{"cmd":["sh","-c","sleep 0.5; echo done"]}`, "running"},
		{"pause", "POST", "/pause", "", "running"},
		{"resume", "POST", "/resume", "", "paused"},
		{"stop", "POST", "/stop", "", "running"},
		{"start", "POST", "/start", "", "stopped"},
		{"hibernate", "POST", "/hibernate", "", "running"},
		{"restore", "POST", "/restore", "", "hibernated"},
		{"snapshot", "POST", "/snapshots", `{"kind":"disk"}`, "running"},
		{"rollback", "POST", "/rollback", "", "running"}, // to a disk snapshot taken first
		{"fork", "POST", "/fork", "", "running"},
		{"delete", "DELETE", "", "", "running"},
	}
	for _, target := range []string{"bridge", "guest"} {
		for _, op := range ops {
			name := target + "/" + op.op
			var sb sandbox
			path := "/v1/sandboxes"
			if op.from != "" {
				sb = in.create("minimal")
				ids = append(ids, sb.ID)
				in.bringTo(sb.ID, op.from)
				path += "/" + sb.ID + op.path
			}
			body := op.body
			if op.op == "rollback" {
				var snap snapshotJSON
				if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", map[string]string{"kind": "disk"}, &snap); code != http.StatusCreated {
					t.Fatalf("snapshot before the rollback: HTTP %d %+v", code, snap)
				}
				body = `{"snapshot":"` + snap.ID + `"}`
			}
			before := time.Now()
			code, msg, killed := in.doKilling(op.method, path, body, sb.ID, target)
			t.Logf("%s: HTTP %d %s (killed %s, after %s)", name, code, msg, killed, time.Since(before).Round(time.Millisecond))
			if code >= 500 && code != http.StatusServiceUnavailable && code != http.StatusBadGateway && code != http.StatusGatewayTimeout {
				t.Errorf("%s: HTTP %d %q, want a success or a classed error", name, code, msg)
			}
			var list struct{ Sandboxes []sandbox }
			in.do("GET", "/v1/sandboxes", nil, &list)
			for _, s := range list.Sandboxes {
				ids = append(ids, s.ID)
				in.converges(name, s.ID)
				in.deleteAll(s.ID)
			}
		}
	}
	in.stop()
	checkInventory(t, before, dir, ids...)
}

// bringTo moves a running sandbox to state.
func (in *instance) bringTo(id, state string) {
	in.t.Helper()
	var path []string
	switch state {
	case "running":
	case "paused":
		path = []string{"/pause"}
	case "stopped":
		path = []string{"/stop"}
	case "hibernated":
		path = []string{"/hibernate"}
	default:
		in.t.Fatalf("bringTo %s", state)
	}
	for _, p := range path {
		var e struct{ Message string }
		if code := in.do("POST", "/v1/sandboxes/"+id+p, nil, &e); code >= 300 {
			in.t.Fatalf("%s %s: HTTP %d %s", p, id, code, e.Message)
		}
	}
}

// doKilling sends a request and, while it is in flight, kills -9 the
// first live target ("bridge": the host bridge; "guest": the guest daemon)
// of sandbox id (of any sandbox when id is empty, for a create). It
// returns the answer and what it killed; an answer that does not come
// within two minutes fails the test as a hang.
func (in *instance) doKilling(method, path, body, id, target string) (int, string, string) {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, in.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+in.key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	type answer struct {
		code int
		msg  string
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e struct{ Message string }
		_ = json.Unmarshal(b, &e)
		done <- answer{code: resp.StatusCode, msg: e.Message}
	}()
	killed := "nothing"
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case a := <-done:
			if a.err != nil {
				in.t.Fatalf("%s %s with the %s killed: %v (a hang)\n%s", method, path, target, a.err, in.logs())
			}
			return a.code, a.msg, killed
		case <-tick.C:
			if killed != "nothing" {
				continue
			}
			if pid := in.targetPid(id, target); pid > 0 {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed = target
				}
			}
		}
	}
}

// targetPid is the pid of a live target of sandbox id's executions (any
// sandbox's when id is empty), 0 when there is none.
func (in *instance) targetPid(id, target string) int {
	pattern := filepath.Join(in.dataDir, "node", "execs", id+"*", "record.json")
	matches, _ := filepath.Glob(pattern)
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		var rec struct {
			SandboxPid int `json:"sandbox_pid"`
			BridgePid  int `json:"bridge_pid"`
		}
		if json.Unmarshal(b, &rec) != nil {
			continue
		}
		switch target {
		case "bridge":
			if rec.BridgePid > 0 && commOf(rec.BridgePid) == "space-host-brid" {
				return rec.BridgePid
			}
		case "guest":
			if pid := guestIn(rec.SandboxPid); pid > 0 {
				return pid
			}
		}
	}
	return 0
}

// guestIn is the pid of the guest daemon in the pid namespace of
// sandboxPid, 0 when there is none.
func guestIn(sandboxPid int) int {
	if sandboxPid <= 0 {
		return 0
	}
	ns, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(sandboxPid), "ns", "pid"))
	if err != nil {
		return 0
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if other, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "pid")); err == nil && other == ns {
			if commOf(pidOf(e.Name())) == "space-guest" {
				return pidOf(e.Name())
			}
		}
	}
	return 0
}

func commOf(pid int) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	return strings.TrimSpace(string(b))
}

// converges checks that sandbox id, after the kill, serves again (an exec
// answers), rests (paused, stopped; hibernated and then restored or refused
// with a reason) or is failed with a reason, within two minutes.
func (in *instance) converges(name, id string) {
	in.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	restored := false
	for {
		var got sandbox
		if in.do("GET", "/v1/sandboxes/"+id, nil, &got) == http.StatusNotFound {
			return
		}
		switch got.State {
		case "failed":
			in.t.Logf("%s: sandbox %s failed: %s", name, id, got.Reason)
			if got.Reason == "" {
				in.t.Errorf("%s: sandbox %s failed with no reason", name, id)
			}
			return
		case "paused", "stopped":
			in.t.Logf("%s: sandbox %s %s", name, id, got.State)
			return
		case "hibernated":
			if restored {
				return
			}
			restored = true
			var e struct{ Message string }
			code := in.do("POST", "/v1/sandboxes/"+id+"/restore", nil, &e)
			if code == http.StatusInternalServerError {
				in.t.Errorf("%s: restore of the hibernated sandbox: 500 %q", name, e.Message)
				return
			}
			continue
		case "running":
			var res execResult
			code := in.do("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"cmd": []string{"echo", "ok"}}, &res)
			if code == http.StatusOK && res.Stdout == "ok\n" {
				in.t.Logf("%s: sandbox %s serves", name, id)
				return
			}
			if code == http.StatusInternalServerError {
				in.t.Errorf("%s: exec in the running sandbox: 500 %+v", name, res)
				return
			}
		}
		if time.Now().After(deadline) {
			in.t.Errorf("%s: sandbox %s neither serves, rests nor failed after 2m: %+v\n%s", name, id, got, in.logs())
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// deleteAll deletes sandbox id and waits until it is gone.
func (in *instance) deleteAll(id string) {
	in.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; {
		code := in.do("DELETE", "/v1/sandboxes/"+id, nil, nil)
		if code == http.StatusNotFound {
			return
		}
		if code == http.StatusInternalServerError {
			in.t.Errorf("delete %s: 500", id)
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("delete %s: still there after 2m (HTTP %d)\n%s", id, code, in.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func pidOf(name string) int {
	n, _ := strconv.Atoi(name)
	return n
}
