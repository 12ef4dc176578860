package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/connecterr"
	"github.com/spacesandbox/space/internal/store"
)

// heartbeatAs sends node id's heartbeat to cp.
func (cp *controlPlane) heartbeatAs(id string) { cp.heartbeatWith(id, 64) }

// heartbeatWith sends node id's heartbeat offering cpus to cp.
func (cp *controlPlane) heartbeatWith(id string, cpus int) {
	cp.t.Helper()
	if code, err := cp.sendHeartbeat(id, cpus); err != nil || code != http.StatusOK {
		cp.t.Fatalf("heartbeat of %s: HTTP %d %v", id, code, err)
	}
}

// sendHeartbeat sends node id's heartbeat offering cpus to cp and returns
// the answer's status; safe on any goroutine.
func (cp *controlPlane) sendHeartbeat(id string, cpus int) (int, error) {
	_, err := heartbeatVia(context.Background(), nil, cp.url, id, testHeartbeat{Address: "127.0.0.1:9", Token: "token-" + id, Runtimes: []string{"ns"}, CPUs: cpus, MemoryMiB: 1 << 20, DiskMiB: 1 << 30})
	var ce *connecterr.Error
	if err != nil && !errors.As(err, &ce) {
		return 0, err
	}
	return httpStatusOf(err), nil
}

// credentialOf registers node id (at an address nothing serves, offering
// only the vm runtime) and
// returns the credential its heartbeat answer gives it.
func (cp *controlPlane) credentialOf(id string) string {
	cp.t.Helper()
	// A vm runtime only: no ns sandbox is placed on it.
	reply, err := heartbeatVia(cp.t.Context(), nil, cp.url, id, testHeartbeat{Address: "127.0.0.1:9", Token: "token-" + id, Runtimes: []string{"vm"}, CPUs: 1, MemoryMiB: 1024, DiskMiB: 1024})
	if err != nil || reply.GetNodeCredential() == "" {
		cp.t.Fatalf("heartbeat of %s: %v, credential %q", id, err, reply.GetNodeCredential())
	}
	return reply.GetNodeCredential()
}

// nodeState returns node id's state in the store.
func (cp *controlPlane) nodeState(id string) store.NodeState {
	cp.t.Helper()
	n, err := cp.st.GetNode(cp.t.Context(), id)
	if err != nil {
		cp.t.Fatal(err)
	}
	return n.State
}

// listedNode returns node id as GET /v1/nodes shows it.
func (cp *controlPlane) listedNode(admin, id string) sandboxv1.Node {
	cp.t.Helper()
	var list sandboxv1.NodeList
	if code, e := cp.do(admin, http.MethodGet, "/v1/nodes", "", &list); code != http.StatusOK {
		cp.t.Fatalf("list nodes: HTTP %d %+v", code, e)
	}
	for _, n := range list.Nodes {
		if n.ID == id {
			return n
		}
	}
	cp.t.Fatalf("node %s not listed in %+v", id, list.Nodes)
	return sandboxv1.Node{}
}

func TestDrainAndUndrainANode(t *testing.T) {
	t.Parallel()
	cp := newControlPlane(t, Config{})
	admin := cp.adminKey()
	cp.heartbeatAs("n2")

	var n sandboxv1.Node
	if code, e := cp.do(admin, http.MethodPost, "/v1/nodes/n2/drain", "", &n); code != http.StatusOK {
		t.Fatalf("drain: HTTP %d %+v", code, e)
	}
	if n.ID != "n2" || n.State != "draining" || n.Live {
		t.Fatalf("drain answered %+v, want n2 draining and not live", n)
	}
	if got := cp.nodeState("n2"); got != store.NodeDraining {
		t.Fatalf("stored state %s, want draining", got)
	}
	// Heartbeats do not undo a drain, nor does one that changes the
	// node's record (a restarted node with more CPUs).
	cp.heartbeatAs("n2")
	cp.heartbeatAs("n2")
	if got := cp.nodeState("n2"); got != store.NodeDraining {
		t.Fatalf("after heartbeats the node is %s, want draining", got)
	}
	cp.heartbeatWith("n2", 32)
	if n, err := cp.st.GetNode(t.Context(), "n2"); err != nil || n.State != store.NodeDraining || n.Capacity.CPUs != 32 {
		t.Fatalf("after a heartbeat with new capacity: %+v %v, want draining with 32 CPUs", n, err)
	}
	if got := cp.listedNode(admin, "n2"); got.State != "draining" || got.Live {
		t.Fatalf("listed %+v, want draining, not live", got)
	}
	// Draining twice is fine.
	if code, e := cp.do(admin, http.MethodPost, "/v1/nodes/n2/drain", "", &n); code != http.StatusOK || n.State != "draining" {
		t.Fatalf("second drain: HTTP %d %+v %+v", code, e, n)
	}

	if code, e := cp.do(admin, http.MethodPost, "/v1/nodes/n2/undrain", "", &n); code != http.StatusOK || n.State != "ready" {
		t.Fatalf("undrain: HTTP %d %+v %+v", code, e, n)
	}
	cp.heartbeatAs("n2")
	if got := cp.listedNode(admin, "n2"); got.State != "ready" || !got.Live {
		t.Fatalf("after undrain listed %+v, want ready and live", got)
	}

	// A node declared down comes back ready with its heartbeat.
	if _, err := cp.st.MarkNodeDown(t.Context(), "n2", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	cp.heartbeatAs("n2")
	if got := cp.nodeState("n2"); got != store.NodeReady {
		t.Fatalf("a down node after its heartbeat is %s, want ready", got)
	}
}

func TestDrainNeedsAnAdminAndAKnownNode(t *testing.T) {
	t.Parallel()
	cp := newControlPlane(t, Config{})
	admin := cp.adminKey()
	for _, verb := range []string{"drain", "undrain"} {
		if code, e := cp.do(cp.key, http.MethodPost, "/v1/nodes/n1/"+verb, "", nil); code != http.StatusForbidden {
			t.Errorf("%s with a tenant key: HTTP %d %+v, want 403", verb, code, e)
		}
		if code, e := cp.do(admin, http.MethodPost, "/v1/nodes/nope/"+verb, "", nil); code != http.StatusNotFound {
			t.Errorf("%s of an unknown node: HTTP %d %+v, want 404", verb, code, e)
		}
		if code, e := cp.do(admin, http.MethodPost, "/v1/nodes/Bad%20Id/"+verb, "", nil); code != http.StatusNotFound {
			t.Errorf("%s of an invalid node id: HTTP %d %+v, want 404", verb, code, e)
		}
	}
	if got := cp.nodeState("n1"); got != store.NodeReady {
		t.Fatalf("refused drains left n1 %s, want ready", got)
	}
}

// Without an object store a drain cannot move a sandbox: it stays on its
// node, running, with the reason in its events; and nothing new is placed
// on a draining node.
func TestDrainWithoutObjectStoreKeepsTheSandbox(t *testing.T) {
	t.Parallel()
	cp := newControlPlane(t, Config{})
	admin := cp.adminKey()
	sb := cp.create(`{"template":"minimal"}`)
	var n sandboxv1.Node
	if code, e := cp.do(admin, http.MethodPost, "/v1/nodes/n1/drain", "", &n); code != http.StatusOK {
		t.Fatalf("drain: HTTP %d %+v", code, e)
	}
	if n.Sandboxes != 1 {
		t.Fatalf("drain answer counts %d sandboxes on n1, want 1", n.Sandboxes)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var evs sandboxv1.EventList
		if code, e := cp.do(cp.key, http.MethodGet, "/v1/sandboxes/"+sb.ID+"/events", "", &evs); code != http.StatusOK {
			t.Fatalf("events: HTTP %d %+v", code, e)
		}
		found := false
		for _, ev := range evs.Events {
			found = found || strings.Contains(ev.Message, "node n1 is draining: the sandbox cannot move: no object store")
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no drain refusal in the events: %+v", evs.Events)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var got sandboxv1.Sandbox
	if code, e := cp.do(cp.key, http.MethodGet, "/v1/sandboxes/"+sb.ID, "", &got); code != http.StatusOK || got.State != "running" {
		t.Fatalf("sandbox after the drain: HTTP %d %+v state %s, want running", code, e, got.State)
	}
	if code, _ := cp.do(cp.key, http.MethodPost, "/v1/sandboxes", `{"template":"minimal"}`, nil); code < 400 {
		t.Fatalf("create with the only node draining: HTTP %d, want an error", code)
	}
}

// TestDrainRacingReRegistration: a drain is never lost to a heartbeat that
// re-registers the node at the same moment (new capacity: the whole record
// is written), whichever lands first.
func TestDrainRacingReRegistration(t *testing.T) {
	t.Parallel()
	cp := newControlPlane(t, Config{})
	admin := cp.adminKey()
	cp.heartbeatAs("n2")
	for round := range 30 {
		if code, e := cp.do(admin, http.MethodPost, "/v1/nodes/n2/undrain", "", nil); code != http.StatusOK {
			t.Fatalf("undrain: HTTP %d %+v", code, e)
		}
		hbDone := make(chan int, 1)
		go func() {
			code, _ := cp.sendHeartbeat("n2", 100+round)
			hbDone <- code
		}()
		if code, e := cp.do(admin, http.MethodPost, "/v1/nodes/n2/drain", "", nil); code != http.StatusOK {
			t.Fatalf("drain: HTTP %d %+v", code, e)
		}
		if code := <-hbDone; code != http.StatusOK {
			t.Fatalf("heartbeat: HTTP %d", code)
		}
		if got := cp.nodeState("n2"); got != store.NodeDraining {
			t.Fatalf("round %d: after a drain and a re-registering heartbeat at once the node is %s, want draining", round, got)
		}
	}
}
