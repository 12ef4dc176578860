package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// forkWithKey forks parent with body under an Idempotency-Key.
func (cp *controlPlane) forkWithKey(parent, key, body string) (int, sandboxv1.Sandbox) {
	cp.t.Helper()
	req, err := http.NewRequest(http.MethodPost, cp.url+"/v1/sandboxes/"+parent+"/fork", strings.NewReader(body))
	if err != nil {
		cp.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+cp.key)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cp.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out sandboxv1.Sandbox
	if resp.StatusCode < 300 {
		if err := json.Unmarshal(b, &out); err != nil {
			cp.t.Fatalf("fork answer %s: %v", b, err)
		}
	}
	return resp.StatusCode, out
}

// TestForkIdempotencyKey: a fork with an Idempotency-Key gets a child id
// derived from the parent and the key, so a retry after the server that
// took the first attempt died (having recorded the child, never answering,
// its answer not remembered) finds that child instead of forking twice.
func TestForkIdempotencyKey(t *testing.T) {
	cp := newControlPlane(t, Config{})
	parent := cp.storeStopped(sandbox.StateStopped)
	body := `{"snapshot": "` + parent.StartFrom + `", "name": "child"}`

	code, first := cp.forkWithKey(parent.ID, "k1", body)
	if code != http.StatusCreated {
		t.Fatalf("fork: HTTP %d", code)
	}
	if want := sandbox.DerivedID("fork", cp.tenant, parent.ID, "k1"); first.ID != want {
		t.Errorf("fork with a key got id %s, want the derived %s", first.ID, want)
	}
	if got, err := cp.st.GetSandboxByID(t.Context(), first.ID); err != nil || !strings.HasPrefix(got.ExecID, first.ID+"-g") {
		t.Errorf("the fork's execution %q is not under its id %s (%v)", got.ExecID, first.ID, err)
	}

	// The first attempt of key k2 recorded its child and died.
	recorded := sandbox.New(cp.tenant, sandbox.Spec{Name: "child2", Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256, DiskMiB: 512}, time.Now())
	recorded.ID = sandbox.DerivedID("fork", cp.tenant, parent.ID, "k2")
	recorded.State, recorded.Desired, recorded.Node = sandbox.StateRunning, sandbox.StateRunning, "n1"
	if err := cp.st.CreateSandbox(t.Context(), recorded); err != nil {
		t.Fatal(err)
	}
	before := cp.count()
	code, again := cp.forkWithKey(parent.ID, "k2", `{"snapshot": "`+parent.StartFrom+`", "name": "child2"}`)
	if code != http.StatusCreated || again.ID != recorded.ID {
		t.Fatalf("retried fork: HTTP %d id %s; want 201 with the recorded child %s", code, again.ID, recorded.ID)
	}
	if after := cp.count(); after != before {
		t.Errorf("the retried fork made another sandbox: %d sandboxes, were %d", after, before)
	}
	// The same key for another fork (another name) is refused.
	if code, _ := cp.forkWithKey(parent.ID, "k2", `{"snapshot": "`+parent.StartFrom+`", "name": "other"}`); code != http.StatusConflict {
		t.Errorf("the key of another fork: HTTP %d, want 409", code)
	}
	// The same key on another parent is another fork.
	other := cp.storeStopped(sandbox.StateStopped)
	code, third := cp.forkWithKey(other.ID, "k2", `{"snapshot": "`+other.StartFrom+`", "name": "child2"}`)
	if code != http.StatusConflict && (code != http.StatusCreated || third.ID == recorded.ID) {
		t.Errorf("key k2 on another parent: HTTP %d id %s", code, third.ID)
	}
}

// count is how many sandboxes the store holds.
func (cp *controlPlane) count() int {
	cp.t.Helper()
	all, err := cp.st.ListSandboxes(cp.t.Context(), store.SandboxFilter{})
	if err != nil {
		cp.t.Fatal(err)
	}
	return len(all)
}

// TestConcurrentRequestsWithOneIdempotencyKey: the same create, and the
// same fork, sent many times at once with one Idempotency-Key (no answer is
// remembered yet when they arrive) have exactly one effect, and every
// request that succeeds answers with that one sandbox.
func TestConcurrentRequestsWithOneIdempotencyKey(t *testing.T) {
	cp := newControlPlane(t, Config{})
	parent := cp.storeStopped(sandbox.StateStopped)
	const racers = 8
	for _, tc := range []struct {
		what, path, body string
	}{
		{"create", "/v1/sandboxes", `{"template": "minimal", "memory_mib": 256}`},
		{"fork", "/v1/sandboxes/" + parent.ID + "/fork", `{"snapshot": "` + parent.StartFrom + `"}`},
	} {
		before := cp.count()
		key := "race-" + tc.what
		ids := make(chan string, racers)
		var wg sync.WaitGroup
		for range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest(http.MethodPost, cp.url+tc.path, strings.NewReader(tc.body))
				req.Header.Set("Authorization", "Bearer "+cp.key)
				req.Header.Set("Idempotency-Key", key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				var out sandboxv1.Sandbox
				b, _ := io.ReadAll(resp.Body)
				switch {
				case resp.StatusCode == http.StatusCreated && json.Unmarshal(b, &out) == nil:
					ids <- out.ID
				case resp.StatusCode == http.StatusConflict:
					// Refused as the same key's request under way: allowed.
				default:
					t.Errorf("%s: HTTP %d %s", tc.what, resp.StatusCode, b)
				}
			}()
		}
		wg.Wait()
		close(ids)
		seen := map[string]bool{}
		for id := range ids {
			seen[id] = true
		}
		if len(seen) != 1 {
			t.Errorf("%d concurrent %ss with one key answered sandboxes %v, want exactly one", racers, tc.what, seen)
		}
		if made := cp.count() - before; made != 1 {
			t.Errorf("%d concurrent %ss with one key made %d sandboxes, want 1", racers, tc.what, made)
		}
	}
}
