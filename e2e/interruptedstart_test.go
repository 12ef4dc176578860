package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestInterruptedStartIsFinished: an execution whose record the node left
// Starting (the node died after the runtime started it and before its guest
// had the sandbox's identity, so its bridge may admit nothing) has its start
// finished when the node starts again: the sandbox keeps running, on the
// same execution, and answers.
func TestInterruptedStartIsFinished(t *testing.T) {
	dir := newDataDir(t)
	in := startServer(t, dir)
	sb := in.create("minimal")
	if r := in.exec(sb.ID, "true"); r.ExitCode != 0 {
		t.Fatalf("exec before: %+v", r)
	}
	in.kill()

	// The node died mid-start: its record of the execution says Starting.
	paths, _ := filepath.Glob(filepath.Join(dir, "node", "execs", "*", "record.json"))
	var recPath string
	var pid int
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var rec map[string]any
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		if rec["sandbox_id"] != sb.ID {
			continue
		}
		rec["starting"] = true
		pid = int(rec["sandbox_pid"].(float64))
		b, _ = json.Marshal(rec)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		recPath = p
	}
	if recPath == "" || pid <= 0 {
		t.Fatalf("no node record of sandbox %s among %v", sb.ID, paths)
	}

	in = startServer(t, dir)
	defer in.stop()
	// A failure must not leave the sandbox running (it outlives servers).
	defer func() {
		if t.Failed() {
			in.do(http.MethodDelete, "/v1/sandboxes/"+sb.ID, nil, nil)
		}
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		var rec struct {
			Starting bool `json:"starting"`
		}
		b, err := os.ReadFile(recPath)
		if err != nil {
			t.Fatalf("the execution's record: %v\n%s", err, in.logs())
		}
		if json.Unmarshal(b, &rec) == nil && !rec.Starting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the node started, the record still says starting\n%s", in.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if syscall.Kill(pid, 0) != nil {
		t.Errorf("the execution (pid %d) is gone: its start should have been finished, not abandoned", pid)
	}
	var got sandbox
	in.do(http.MethodGet, "/v1/sandboxes/"+sb.ID, nil, &got)
	if got.State != "running" {
		t.Fatalf("sandbox %+v, want running", got)
	}
	// Right after a restart a node may still be hearing from the control
	// plane (keys, clock): 503 says retry.
	for deadline := time.Now().Add(30 * time.Second); ; {
		var res execResult
		code := in.do(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"true"}}, &res)
		if code == http.StatusOK && res.ExitCode == 0 {
			break
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("exec after the start was finished: HTTP %d %+v\n%s", code, res, in.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	in.delete(sb.ID)
}
