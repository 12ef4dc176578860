package e2e

import (
	"net/http"
	"testing"
	"time"
)

// pausedLongEnough is longer than the HTTP/2 health check the host bridge
// ran on its guest channel (30 s idle, then a ping answered within 15 s).
const pausedLongEnough = 50 * time.Second

// TestPausedSandboxKeepsItsChannel: a sandbox paused for longer than a ping
// could go unanswered resumes and runs its next exec. Its guest is frozen
// while paused and answers nothing; the host bridge's health-check pings
// ended the channel of every sandbox paused for 45 s (the sandbox failed,
// "guest channel closed ... conn_close_lost_ping").
func TestPausedSandboxKeepsItsChannel(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	sb := in.create("minimal")
	defer in.delete(sb.ID)
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/pause", nil, nil); code >= 300 {
		t.Fatalf("pause: HTTP %d", code)
	}
	if got := in.settle(sb.ID, "pause"); got.State != "paused" {
		t.Fatalf("after pause: %+v", got)
	}
	time.Sleep(pausedLongEnough)
	var got sandbox
	if in.do("GET", "/v1/sandboxes/"+sb.ID, nil, &got); got.State != "paused" {
		t.Fatalf("after %v paused the sandbox is %s (%s), want paused", pausedLongEnough, got.State, got.Reason)
	}
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/resume", nil, nil); code >= 300 {
		t.Fatalf("resume after %v paused: HTTP %d", pausedLongEnough, code)
	}
	if got := in.settle(sb.ID, "resume"); got.State != "running" {
		t.Fatalf("after resume: %+v", got)
	}
	var res execResult
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"echo", "back"}}, &res); code != http.StatusOK || res.Stdout != "back\n" {
		t.Fatalf("exec after %v paused: HTTP %d %+v", pausedLongEnough, code, res)
	}
}
