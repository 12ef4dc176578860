package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestConcurrentLifecycleOperations (F-7, T1) races lifecycle operations on
// one sandbox of a real server, node, node-manager and ns sandboxes: pause
// ‖ delete, resume ‖ resume, hibernate ‖ exec and delete ‖ snapshot, each a
// few times. After each race the sandbox is in a state the two operations
// explain in some order, every loser was answered 409 (a conflict or an
// operation overtaken) or 404 (the sandbox deleted), nobody waited out
// the server's wait (202), and the host holds exactly the execution the
// record names: none of an older generation, none of a deleted or
// hibernated sandbox (no zombie activation). TestConcurrentLifecycle in
// internal/service is the model check of the same (T0).
func TestConcurrentLifecycleOperations(t *testing.T) {
	dir := newDataDir(t)
	in := startServer(t, dir)
	// What the server holds with no sandbox: each race must leave the host
	// as it found it.
	before := inventory(dir)
	const rounds = 5

	t.Run("PauseDelete", func(t *testing.T) {
		for round := range rounds {
			sb := in.create("minimal")
			a, b := race(t, in, call{"POST", "/v1/sandboxes/" + sb.ID + "/pause", "", ""}, call{"DELETE", "/v1/sandboxes/" + sb.ID, "", ""})
			t.Logf("round %d: pause %s, delete %s", round, a, b)
			wantAnswer(t, "delete", b, http.StatusNoContent)
			wantAnswer(t, "pause", a, http.StatusOK, http.StatusConflict, http.StatusNotFound)
			wantGone(t, in, sb.ID)
			checkInventory(t, before, dir, sb.ID)
		}
	})

	t.Run("ResumeResume", func(t *testing.T) {
		sb := in.create("minimal")
		for round := range rounds {
			if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/pause", nil, nil); code != http.StatusOK {
				t.Fatalf("pause: HTTP %d", code)
			}
			resume := call{"POST", "/v1/sandboxes/" + sb.ID + "/resume", "", ""}
			a, b := race(t, in, resume, resume)
			t.Logf("round %d: resume %s, resume %s", round, a, b)
			// A resume repeated while the first is under way is legal and
			// waits for the same result.
			wantAnswer(t, "first resume", a, http.StatusOK)
			wantAnswer(t, "second resume", b, http.StatusOK)
			got := wantState(t, in, sb.ID, "running")
			if res := in.exec(sb.ID, "echo", "one"); res.Stdout != "one\n" {
				t.Errorf("exec after the resumes: %+v", res)
			}
			wantExecutions(t, dir, sb.ID, got)
		}
		in.delete(sb.ID)
		checkInventory(t, before, dir, sb.ID)
	})

	t.Run("HibernateExec", func(t *testing.T) {
		sb := in.create("minimal")
		in.exec(sb.ID, "sh", "-c", "echo kept > /home/user/kept")
		for round := range rounds {
			exec := call{"POST", "/v1/sandboxes/" + sb.ID + "/exec", `{"cmd":["sh","-c","echo ran >> /home/user/log"]}`, ""}
			a, b := race(t, in, call{"POST", "/v1/sandboxes/" + sb.ID + "/hibernate", "", ""}, exec)
			t.Logf("round %d: hibernate %s, exec %s", round, a, b)
			wantAnswer(t, "hibernate", a, http.StatusOK)
			// The exec ran before the pause, or lost: refused or cut by
			// the hibernation, answered 409 naming the sandbox's state.
			wantAnswer(t, "exec", b, http.StatusOK, http.StatusConflict)
			got := wantState(t, in, sb.ID, "hibernated")
			wantExecutions(t, dir, sb.ID, got)
			if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/restore", nil, nil); code != http.StatusOK {
				t.Fatalf("restore after the race: HTTP %d\n%s", code, in.logs())
			}
			got = wantState(t, in, sb.ID, "running")
			wantExecutions(t, dir, sb.ID, got)
			if res := in.exec(sb.ID, "cat", "/home/user/kept"); res.Stdout != "kept\n" {
				t.Fatalf("after hibernate ‖ exec and a restore the disk reads %+v, want what was written before", res)
			}
			ran := strings.Count(in.exec(sb.ID, "cat", "/home/user/log").Stdout, "ran\n")
			if b.code == http.StatusOK && ran < 1 {
				t.Errorf("the exec answered 200 but its write is not on the restored disk")
			}
		}
		in.delete(sb.ID)
		checkInventory(t, before, dir, sb.ID)
	})

	t.Run("DeleteSnapshot", func(t *testing.T) {
		for round := range rounds {
			sb := in.create("minimal")
			a, b := race(t, in, call{"DELETE", "/v1/sandboxes/" + sb.ID, "", ""}, call{"POST", "/v1/sandboxes/" + sb.ID + "/snapshots", `{"kind":"disk"}`, ""})
			t.Logf("round %d: delete %s, snapshot %s", round, a, b)
			wantAnswer(t, "delete", a, http.StatusNoContent)
			// Taken before the delete (201; it goes with the sandbox), or
			// refused: deleting (409), gone (404).
			wantAnswer(t, "snapshot", b, http.StatusCreated, http.StatusConflict, http.StatusNotFound)
			wantGone(t, in, sb.ID)
			if b.code == http.StatusCreated {
				var snap snapshotJSON
				json.Unmarshal([]byte(b.body), &snap)
				if code := in.do("GET", "/v1/snapshots/"+snap.ID, nil, nil); code != http.StatusNotFound {
					t.Errorf("snapshot %s of the deleted sandbox: HTTP %d, want 404 (it goes with its sandbox)", snap.ID, code)
				}
			}
			checkInventory(t, before, dir, sb.ID)
		}
	})
}

// TestConcurrentLifecycleOnTwoReplicas (F-7, T1) is the races of
// TestConcurrentLifecycleOperations sent to two control-plane replicas
// (over PostgreSQL, behind no balancer: one request to each) that share one
// node: resume ‖ resume, pause ‖ delete and delete ‖ snapshot, each a few
// times. The replicas learn of each other's writes from the store's
// announcements; the waiter on one replica must see what the other did.
func TestConcurrentLifecycleOnTwoReplicas(t *testing.T) {
	c := startCluster(t, 2, 1)
	in := c.api
	r0, r1 := c.replicaURL(0), c.replicaURL(1)
	dir := c.nodes[0].dir
	before := inventory(dir)
	const rounds = 3
	sb := c.mustCreate(256)
	for round := range rounds {
		if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/pause", nil, nil); code != http.StatusOK {
			t.Fatalf("pause: HTTP %d", code)
		}
		a, b := race(t, in, call{"POST", "/v1/sandboxes/" + sb.ID + "/resume", "", r0}, call{"POST", "/v1/sandboxes/" + sb.ID + "/resume", "", r1})
		t.Logf("round %d: resume on replica 0 %s, resume on replica 1 %s", round, a, b)
		wantAnswer(t, "resume on replica 0", a, http.StatusOK)
		wantAnswer(t, "resume on replica 1", b, http.StatusOK)
		got := wantState(t, in, sb.ID, "running")
		wantExecutions(t, dir, sb.ID, got)
	}
	in.delete(sb.ID)
	for round := range rounds {
		sb := c.mustCreate(256)
		a, b := race(t, in, call{"POST", "/v1/sandboxes/" + sb.ID + "/pause", "", r0}, call{"DELETE", "/v1/sandboxes/" + sb.ID, "", r1})
		t.Logf("round %d: pause on replica 0 %s, delete on replica 1 %s", round, a, b)
		wantAnswer(t, "delete", b, http.StatusNoContent)
		wantAnswer(t, "pause", a, http.StatusOK, http.StatusConflict, http.StatusNotFound)
		wantGone(t, in, sb.ID)
		checkInventory(t, before, dir, sb.ID)

		sb = c.mustCreate(256)
		a, b = race(t, in, call{"DELETE", "/v1/sandboxes/" + sb.ID, "", r0}, call{"POST", "/v1/sandboxes/" + sb.ID + "/snapshots", `{"kind":"disk"}`, r1})
		t.Logf("round %d: delete on replica 0 %s, snapshot on replica 1 %s", round, a, b)
		wantAnswer(t, "delete", a, http.StatusNoContent)
		wantAnswer(t, "snapshot", b, http.StatusCreated, http.StatusConflict, http.StatusNotFound)
		wantGone(t, in, sb.ID)
		checkInventory(t, before, dir, sb.ID)
	}
}

// call is one request of a race; via is the base URL it goes to (""
// the instance's).
type call struct{ method, path, body, via string }

// answer is what a request of a race got.
type answer struct {
	code int
	body string
	took time.Duration
}

func (a answer) String() string {
	msg := a.body
	if len(msg) > 160 {
		msg = msg[:160] + "…"
	}
	return fmt.Sprintf("HTTP %d in %s %s", a.code, a.took.Round(time.Millisecond), strings.TrimSpace(msg))
}

// race sends both requests at once (released together) and returns their
// answers.
func race(t *testing.T, in *instance, a, b call) (answer, answer) {
	t.Helper()
	var out [2]answer
	var errs [2]error
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i, c := range []call{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			out[i], errs[i] = send(in, c)
		}()
	}
	close(gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s %s: %v", []call{a, b}[i].method, []call{a, b}[i].path, err)
		}
	}
	return out[0], out[1]
}

// send makes one request with the instance's key; it may run on any
// goroutine (it never fails the test itself).
func send(in *instance, c call) (answer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var body io.Reader
	if c.body != "" {
		body = bytes.NewReader([]byte(c.body))
	}
	base := in.url
	if c.via != "" {
		base = c.via
	}
	req, err := http.NewRequestWithContext(ctx, c.method, base+c.path, body)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+in.key)
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return answer{code: resp.StatusCode, body: string(b), took: time.Since(start)}, nil
}

// wantAnswer fails unless what got is one of the codes allowed.
func wantAnswer(t *testing.T, what string, got answer, allowed ...int) {
	t.Helper()
	if !slices.Contains(allowed, got.code) {
		t.Errorf("%s: %s, want one of %v", what, got, allowed)
	}
}

// wantGone fails unless sandbox id is gone (404) and stays gone.
func wantGone(t *testing.T, in *instance, id string) {
	t.Helper()
	for range 3 {
		if code := in.do("GET", "/v1/sandboxes/"+id, nil, nil); code != http.StatusNotFound {
			t.Fatalf("sandbox %s after its delete: HTTP %d, want 404", id, code)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// wantState fails unless sandbox id is in state (settled: no transitional
// state is accepted) and returns it.
func wantState(t *testing.T, in *instance, id, state string) sandbox {
	t.Helper()
	var got sandbox
	if code := in.do("GET", "/v1/sandboxes/"+id, nil, &got); code != http.StatusOK || got.State != state {
		t.Fatalf("sandbox %s: HTTP %d %+v, want %s\n%s", id, code, got, state, in.logs())
	}
	return got
}

// wantExecutions fails unless, within a few seconds, the host holds for
// sandbox sb the execution of its current generation only when it runs or
// is paused, and none otherwise: what the inventory names (processes,
// cgroups, network namespaces, mounts) by execution id
// ("<sandbox>-g<generation>-…").
func wantExecutions(t *testing.T, dir, id string, sb sandbox) {
	t.Helper()
	var want []string
	if sb.State == "running" || sb.State == "paused" {
		want = []string{fmt.Sprintf("%s-g%d", id, sb.Generation)}
	}
	re := regexp.MustCompile(regexp.QuoteMeta(id) + `-g[0-9]+`)
	deadline := time.Now().Add(15 * time.Second)
	for {
		var got []string
		var lines []string
		for _, s := range inventory(dir, id) {
			for _, m := range re.FindAllString(s, -1) {
				lines = append(lines, s)
				if !slices.Contains(got, m) {
					got = append(got, m)
				}
			}
		}
		slices.Sort(got)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %s (generation %d): the host holds executions %q, want %q:\n%s", id, sb.State, sb.Generation, got, want, strings.Join(lines, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
