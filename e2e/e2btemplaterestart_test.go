package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestE2BTemplateBuildRestart: a template build of the E2B API running
// when its server stops (SIGTERM) or dies (SIGKILL) answers, once the
// server is back on the same data dir, the status error "the server
// restarted during the build" instead of 404, and its build sandbox is
// gone; a finished build's status answers after the restart too.
func TestE2BTemplateBuildRestart(t *testing.T) {
	dir := newDataDir(t)
	in := startServer(t, dir)
	defer func() { in.stop() }()

	done := startE2BBuild(t, in, "e2bdone", "true")
	waitE2BBuild(t, in, "e2bdone", done, "ready", time.Minute)

	for _, how := range []string{"stop", "kill"} {
		name := "e2brestart-" + how
		id := startE2BBuild(t, in, name, "sleep 600")
		waitE2BBuild(t, in, name, id, "building", 2*time.Minute)
		sb := waitBuildSandbox(t, in, name)
		if how == "stop" {
			in.stop()
		} else {
			in.kill()
		}
		in = startServer(t, dir)
		// A stop records the failure itself; a dead server's build is
		// found lost once its record went unwritten for 30 s.
		st := waitE2BBuild(t, in, name, id, "error", 3*time.Minute)
		reason, _ := st["reason"].(map[string]any)
		if msg := fmt.Sprint(reason["message"]); !strings.Contains(msg, "the server restarted during the build") {
			t.Errorf("%s: reason %q, want the server restarted during the build", how, msg)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for in.do("GET", "/v1/sandboxes/"+sb, nil, nil) != http.StatusNotFound {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the build sandbox %s is still there 2 minutes after the restart\n%s", how, sb, in.logs())
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	if st := waitE2BBuild(t, in, "e2bdone", done, "ready", time.Minute); st["status"] != "ready" {
		t.Errorf("the finished build after the restarts: %v", st)
	}
}

// startE2BBuild asks the E2B API for a build of name whose one step runs
// cmd, starts it and returns its id.
func startE2BBuild(t *testing.T, in *instance, name, cmd string) string {
	t.Helper()
	var req struct {
		BuildID string `json:"buildID"`
	}
	if code := in.do("POST", "/e2b/v3/templates", map[string]any{"name": name}, &req); code != http.StatusAccepted {
		t.Fatalf("request a build of %s: HTTP %d\n%s", name, code, in.logs())
	}
	spec := map[string]any{"fromTemplate": "minimal", "steps": []map[string]any{{"type": "RUN", "args": []string{cmd}}}}
	if code := in.do("POST", "/e2b/v2/templates/"+name+"/builds/"+req.BuildID, spec, nil); code != http.StatusAccepted {
		t.Fatalf("start build %s: HTTP %d\n%s", req.BuildID, code, in.logs())
	}
	return req.BuildID
}

// waitE2BBuild waits until build id of name has status want and returns
// the status answer.
func waitE2BBuild(t *testing.T, in *instance, name, id, want string, limit time.Duration) map[string]any {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		var st map[string]any
		code := in.do("GET", "/e2b/templates/"+name+"/builds/"+id+"/status", nil, &st)
		if code == http.StatusOK && st["status"] == want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("build %s of %s: HTTP %d %v after %s, want status %s\n%s", id, name, code, st, limit, want, in.logs())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitBuildSandbox waits for the build sandbox of template name, running,
// and returns its id.
func waitBuildSandbox(t *testing.T, in *instance, name string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var list struct {
			Sandboxes []struct {
				ID       string            `json:"id"`
				State    string            `json:"state"`
				Metadata map[string]string `json:"metadata"`
			} `json:"sandboxes"`
		}
		if in.do("GET", "/v1/sandboxes", nil, &list) == http.StatusOK {
			for _, s := range list.Sandboxes {
				if s.Metadata["dockerfile-cache"] == name && s.State == "running" {
					return s.ID
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no running build sandbox of %s after 2 minutes\n%s", name, in.logs())
		}
		time.Sleep(250 * time.Millisecond)
	}
}
