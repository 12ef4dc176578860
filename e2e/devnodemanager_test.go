package e2e

import (
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/privop"
)

// TestDevServerRestartsNodeManager kills (-9) the node-manager a --dev
// server started, twice, the server left running: each time the server
// starts it again on its own (logging the exit's status), the next create
// succeeds at once and serves, and the sandbox created before keeps its
// execution and data — the new node-manager finds it: it pauses and
// resumes (the node-manager's cgroup freeze) and has one execution on the
// host.
func TestDevServerRestartsNodeManager(t *testing.T) {
	dir := newDataDir(t)
	in := startServer(t, dir)
	defer in.stop()
	pm := privop.NewClient(filepath.Join(dir, "run", "node-manager.sock"))
	old := in.createWith("minimal", "ns")
	in.exec(old.ID, "sh", "-c", "echo acknowledged > "+ackFile)
	ids := []string{old.ID}
	pid := nodeManagerPid(t, pm, 0, in)
	for round := 1; round <= 2; round++ {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("round %d: kill -9 the node-manager %d: %v", round, pid, err)
		}
		pid = nodeManagerPid(t, pm, pid, in)
		select {
		case <-in.exited:
			t.Fatalf("round %d: the server exited:\n%s", round, in.logs())
		default:
		}
		if got := strings.Count(in.logs(), nodeManagerRestartLine); got != round {
			t.Errorf("round %d: the server logged %d node-manager exits, want %d:\n%s", round, got, round, in.logs())
		}
		if !strings.Contains(in.logs(), "signal: killed") {
			t.Errorf("round %d: the log does not name the exit's status (signal: killed):\n%s", round, in.logs())
		}
		sb := in.createWith("minimal", "ns")
		ids = append(ids, sb.ID)
		if sb.State != "running" {
			t.Fatalf("round %d: the create after the node-manager's restart: %+v, want running", round, sb)
		}
		if res := in.exec(sb.ID, "echo", "served"); res.Stdout != "served\n" {
			t.Errorf("round %d: exec in the new sandbox: %+v", round, res)
		}
		in.wantAck(old.ID, "the sandbox created before the kill")
		in.mustDo("POST", "/v1/sandboxes/"+old.ID+"/pause", "")
		if got := in.settle(old.ID, "pause"); got.State != "paused" {
			t.Fatalf("round %d: pause of the sandbox created before: %+v\n%s", round, got, in.logs())
		}
		in.mustDo("POST", "/v1/sandboxes/"+old.ID+"/resume", "")
		in.wantRunning(old.ID, "resume of the sandbox created before the kill")
	}
	for _, id := range ids {
		in.delete(id)
		in.waitGone(id)
	}
	in.waitNoVolumes(ids)
}

// TestDevServerRestartsNodeManagerUnarmed: a --dev server armed with a
// node-manager failpoint of create sees its node-manager die there and
// starts it again unarmed (SPACE_FAILPOINTS emptied for a restart): the
// create completes, the server never restarted, the sandbox serves and
// has one execution on the host. Armed again, the new node-manager would
// die at the point on every retry of the create.
func TestDevServerRestartsNodeManagerUnarmed(t *testing.T) {
	for _, p := range []*failpoint.Point{failpoint.NodeManagerAfterClone, failpoint.NodeManagerAfterRuntime} {
		t.Run(p.Name, func(t *testing.T) {
			dir := newDataDir(t)
			in := launchServer(t, dir, []string{failpoint.EnvVar + "=" + p.Name + "=exit"})
			defer in.stop()
			defer func() {
				if t.Failed() {
					t.Logf("the server's log:\n%s", in.logs())
				}
			}()
			in.waitTemplate("minimal")
			pm := privop.NewClient(filepath.Join(dir, "run", "node-manager.sock"))
			pid := nodeManagerPid(t, pm, 0, in)
			// A key of this run's own: a sandbox's id follows from it, and
			// an earlier run's leftovers on the host must not be taken
			// for this one's.
			idem := "nm-restart-unarmed-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			body := []byte(`{"template":"minimal","runtime":"ns","memory_mib":256}`)
			in.send("POST", "/v1/sandboxes", string(body), idem)
			line := "failpoint " + p.Name + ": exit"
			for deadline := time.Now().Add(3 * time.Minute); !nodeManagerRestarted(in.logs(), line); {
				select {
				case <-in.exited:
					t.Fatalf("the server exited:\n%s", in.logs())
				case <-time.After(50 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatalf("the node-manager did not die at %s and start again within 3m\n%s", p.Name, in.logs())
				}
			}
			nodeManagerPid(t, pm, pid, in)
			var sb sandbox
			code := 0
			for deadline := time.Now().Add(3 * time.Minute); ; {
				select {
				case <-in.exited:
					t.Fatalf("the server exited while the create was retried (%d times %q in its log):\n%s", strings.Count(in.logs(), line), line, in.logs())
				default:
				}
				code = in.doIdem(idem, "POST", "/v1/sandboxes", body, &sb)
				if code == http.StatusCreated && sb.State == "running" || time.Now().After(deadline) {
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
			if code != http.StatusCreated || sb.State != "running" {
				t.Fatalf("the create after the node-manager's restart: HTTP %d %+v\n%s", code, sb, in.logs())
			}
			select {
			case <-in.exited:
				t.Fatalf("the server exited:\n%s", in.logs())
			default:
			}
			if n := strings.Count(in.logs(), line); n != 1 {
				t.Errorf("the node-manager died at %s %d times, want once (a restart is unarmed)", p.Name, n)
			}
			in.exec(sb.ID, "sh", "-c", "echo acknowledged > "+ackFile)
			in.wantRunning(sb.ID, "the create cut by the node-manager's death")
			in.delete(sb.ID)
			in.waitGone(sb.ID)
			in.waitNoVolumes([]string{sb.ID})
		})
	}
}

// nodeManagerPid waits until a node-manager other than pid not answers
// on pm, and returns its pid.
func nodeManagerPid(t *testing.T, pm *privop.Client, not int, in *instance) int {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		h, err := pm.Hello(ctx)
		cancel()
		if err == nil && h.Pid != not {
			return h.Pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no node-manager but %d answers within 2m of the kill (%v): the server did not start it again\n%s", not, err, in.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
