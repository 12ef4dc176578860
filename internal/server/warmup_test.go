package server

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/e2bapi"
	"github.com/spacesandbox/space/internal/scheduler"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// beat sends node n1's heartbeat (at the fake node, which starts any
// runtime) offering runtimes and bringing up pending.
func (cp *controlPlane) beat(runtimes, pending []string) {
	cp.t.Helper()
	if _, err := heartbeatVia(cp.t.Context(), nil, cp.url, "n1", testHeartbeat{Address: cp.nodeAddr, Token: "node-token", Runtimes: runtimes, RuntimesPending: pending,
		CPUs: 64, MemoryMiB: 1 << 20, DiskMiB: 1 << 30}); err != nil {
		cp.t.Fatalf("heartbeat: %v", err)
	}
}

// createAnswer is the answer to a create.
type createAnswer struct {
	code int
	sb   sandboxv1.Sandbox
	err  sandboxv1.Error
}

// createAsync issues a create and returns a channel with its answer.
func (cp *controlPlane) createAsync(body string) <-chan createAnswer {
	out := make(chan createAnswer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, cp.url+"/v1/sandboxes", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+cp.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- createAnswer{err: sandboxv1.Error{Message: err.Error()}}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		a := createAnswer{code: resp.StatusCode}
		if a.code == http.StatusCreated {
			_ = json.Unmarshal(b, &a.sb)
		} else {
			_ = json.Unmarshal(b, &a.err)
		}
		out <- a
	}()
	return out
}

// stillWaiting checks that a create has not answered after a few polls of
// its wait.
func stillWaiting(t *testing.T, ch <-chan createAnswer) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("create answered while what it needs is not ready: HTTP %d %+v", a.code, a.err)
	case <-time.After(5 * service.WarmupPoll):
	}
}

func (cp *controlPlane) events(id string) sandboxv1.EventList {
	cp.t.Helper()
	var list sandboxv1.EventList
	if code, e := cp.do(cp.key, http.MethodGet, "/v1/sandboxes/"+id+"/events", "", &list); code != http.StatusOK {
		cp.t.Fatalf("events of %s: HTTP %d %+v", id, code, e)
	}
	return list
}

func (cp *controlPlane) setTemplate(name string, state store.TemplateState, reason string) {
	cp.t.Helper()
	tpl, err := cp.st.GetTemplate(cp.t.Context(), name)
	if err != nil {
		tpl = store.Template{Name: name, Source: "builtin:minimal", State: state, Reason: reason}
		if err := cp.st.CreateTemplate(cp.t.Context(), tpl); err != nil {
			cp.t.Fatal(err)
		}
		return
	}
	tpl.State, tpl.Reason = state, reason
	if err := cp.st.UpdateTemplate(cp.t.Context(), tpl); err != nil {
		cp.t.Fatal(err)
	}
}

// TestCreateWaitsForBuildingTemplate: a create for a template that is
// building waits until it is ready, and its events say what it waited for.
func TestCreateWaitsForBuildingTemplate(t *testing.T) {
	cp := newControlPlane(t, Config{})
	cp.setTemplate("slow", store.TemplateBuilding, "")
	ch := cp.createAsync(`{"template":"slow"}`)
	stillWaiting(t, ch)
	cp.setTemplate("slow", store.TemplateReady, "")
	a := <-ch
	if a.code != http.StatusCreated {
		t.Fatalf("create after the template became ready: HTTP %d %+v, want 201", a.code, a.err)
	}
	if ev := cp.events(a.sb.ID); !hasEvent(ev, "waiting", "waiting for template slow to finish building") {
		t.Errorf("events %+v: want the wait for the template", ev.Events)
	}
}

// TestCreateTemplateBuildFails: a create waiting for a template whose build
// fails answers with the build's failure.
func TestCreateTemplateBuildFails(t *testing.T) {
	cp := newControlPlane(t, Config{})
	cp.setTemplate("slow", store.TemplateBuilding, "")
	ch := cp.createAsync(`{"template":"slow"}`)
	stillWaiting(t, ch)
	cp.setTemplate("slow", store.TemplateFailed, "apt-get: exit status 100")
	a := <-ch
	if a.code == http.StatusCreated || !strings.Contains(a.err.Message, `template "slow" failed to build: apt-get: exit status 100`) {
		t.Fatalf("create: HTTP %d %+v, want the build's failure", a.code, a.err)
	}
}

// TestCreateWaitBound: past WarmupWait the create fails saying what it
// waited for.
func TestCreateWaitBound(t *testing.T) {
	cp := newControlPlane(t, Config{WarmupWait: 3 * service.WarmupPoll})
	cp.setTemplate("slow", store.TemplateBuilding, "")
	a := <-cp.createAsync(`{"template":"slow"}`)
	if a.code != http.StatusServiceUnavailable || !strings.Contains(a.err.Message, "still waiting for template slow to finish building after 600ms") {
		t.Fatalf("create: HTTP %d %+v, want 503 naming the wait and its bound", a.code, a.err)
	}
	if n := cp.count(); n != 0 {
		t.Errorf("%d sandboxes recorded by a create that failed", n)
	}
}

// TestCreateWaitsForRuntimeComingUp: a create naming vm while the only node
// is bringing vm up waits for it and runs there.
func TestCreateWaitsForRuntimeComingUp(t *testing.T) {
	cp := newControlPlane(t, Config{})
	cp.beat([]string{"ns"}, []string{"vm"})
	ch := cp.createAsync(`{"template":"minimal","runtime":"vm"}`)
	stillWaiting(t, ch)
	cp.beat([]string{"ns", "vm"}, nil)
	a := <-ch
	if a.code != http.StatusCreated || a.sb.Runtime != "vm" {
		t.Fatalf("create: HTTP %d runtime %q %+v, want 201 on vm", a.code, a.sb.Runtime, a.err)
	}
	if ev := cp.events(a.sb.ID); !hasEvent(ev, "waiting", "waiting for node n1 to bring up the vm runtime") {
		t.Errorf("events %+v: want the wait for the runtime", ev.Events)
	}
}

// TestCreateVMNeverOffered: no node offers vm or brings it up: a create
// naming vm fails at once, as before (nothing to wait for).
func TestCreateVMNeverOffered(t *testing.T) {
	cp := newControlPlane(t, Config{})
	code, e := cp.do(cp.key, http.MethodPost, "/v1/sandboxes", `{"template":"minimal","runtime":"vm"}`, nil)
	if code == http.StatusCreated || !strings.Contains(e.Message, "no node can take a vm sandbox") {
		t.Fatalf("create: HTTP %d %+v, want the placement failure", code, e)
	}
}

// TestAutoRuntime: with --default-runtime auto, a create naming no runtime
// gets vm while a node brings it up (after waiting), is refused when no
// node will offer vm and the operator did not allow a fallback, and gets ns
// with an event when they did.
func TestAutoRuntime(t *testing.T) {
	t.Run("vm coming up", func(t *testing.T) {
		cp := newControlPlane(t, Config{DefaultRuntime: "auto"})
		cp.beat([]string{"ns"}, []string{"vm"})
		ch := cp.createAsync(`{"template":"minimal"}`)
		stillWaiting(t, ch)
		cp.beat([]string{"ns", "vm"}, nil)
		a := <-ch
		if a.code != http.StatusCreated || a.sb.Runtime != "vm" {
			t.Fatalf("create: HTTP %d runtime %q %+v, want 201 on vm, never a silent ns", a.code, a.sb.Runtime, a.err)
		}
		var got sandboxv1.Sandbox
		cp.do(cp.key, http.MethodGet, "/v1/sandboxes/"+a.sb.ID, "", &got)
		if got.Runtime != "vm" {
			t.Errorf("GET says runtime %q, want vm", got.Runtime)
		}
	})
	t.Run("no vm, no fallback", func(t *testing.T) {
		cp := newControlPlane(t, Config{DefaultRuntime: "auto"})
		code, e := cp.do(cp.key, http.MethodPost, "/v1/sandboxes", `{"template":"minimal"}`, nil)
		if code == http.StatusCreated || !strings.Contains(e.Message, "no node offers the vm runtime or is bringing it up") || !strings.Contains(e.Message, "--runtime-fallback ns") {
			t.Fatalf("create: HTTP %d %+v, want the refusal naming the reason and the flag", code, e)
		}
		if n := cp.count(); n != 0 {
			t.Errorf("%d sandboxes recorded by a refused create", n)
		}
	})
	t.Run("fallback ns", func(t *testing.T) {
		cp := newControlPlane(t, Config{DefaultRuntime: "auto", RuntimeFallback: "ns"})
		sb := cp.create(`{"template":"minimal"}`)
		if sb.Runtime != "ns" {
			t.Fatalf("runtime %q, want ns", sb.Runtime)
		}
		if ev := cp.events(sb.ID); !hasEvent(ev, "runtime", service.FallbackNote) {
			t.Errorf("events %+v: want %q", ev.Events, service.FallbackNote)
		}
		// E2B clients learn it too: a header on the create answer, the
		// metadata of getInfo.
		req, _ := http.NewRequest(http.MethodPost, cp.url+E2BPathPrefix+"/sandboxes", strings.NewReader(`{"templateID":"minimal"}`))
		req.Header.Set("X-API-Key", cp.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var created struct{ SandboxID string }
		json.NewDecoder(resp.Body).Decode(&created)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || resp.Header.Get(e2bapi.RuntimeHeader) != "ns" {
			t.Fatalf("E2B create: HTTP %d %s=%q, want 201 with ns", resp.StatusCode, e2bapi.RuntimeHeader, resp.Header.Get(e2bapi.RuntimeHeader))
		}
		req, _ = http.NewRequest(http.MethodGet, cp.url+E2BPathPrefix+"/sandboxes/"+created.SandboxID, nil)
		req.Header.Set("X-API-Key", cp.key)
		if resp, err = http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		}
		var info struct{ Metadata map[string]string }
		json.NewDecoder(resp.Body).Decode(&info)
		resp.Body.Close()
		if info.Metadata[e2bapi.RuntimeKey] != "ns" {
			t.Errorf("E2B getInfo metadata %v, want %s=ns", info.Metadata, e2bapi.RuntimeKey)
		}
		if ev := cp.events(created.SandboxID); !hasEvent(ev, "runtime", service.FallbackNote) {
			t.Errorf("E2B-created sandbox's events %+v: want %q", ev.Events, service.FallbackNote)
		}
	})
}

// TestReadyz: /readyz says what is not ready (503) until the default
// template is ready and a node offers the default runtime; /healthz
// answers 200 throughout.
func TestReadyz(t *testing.T) {
	cp := newControlPlane(t, Config{DefaultRuntime: "auto"})
	ready := func() (int, sandboxv1.Readiness) {
		t.Helper()
		resp, err := http.Get(cp.url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r sandboxv1.Readiness
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatalf("readyz body: %v", err)
		}
		return resp.StatusCode, r
	}
	healthy := func() {
		t.Helper()
		resp, err := http.Get(cp.url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("healthz: HTTP %d, want 200 while the server serves", resp.StatusCode)
		}
	}
	cp.setTemplate(service.DefaultTemplate, store.TemplateBuilding, "")
	cp.beat([]string{"ns"}, []string{"vm"})
	steps := []struct {
		name     string
		change   func()
		code     int
		notReady []string
	}{
		{"building, vm coming", func() {}, 503, []string{"template base is building", "a node is bringing up the vm runtime"}},
		{"template ready", func() { cp.setTemplate(service.DefaultTemplate, store.TemplateReady, "") }, 503, []string{"a node is bringing up the vm runtime"}},
		{"vm offered", func() { cp.beat([]string{"ns", "vm"}, nil) }, 200, nil},
		{"vm gone", func() { cp.beat([]string{"ns"}, nil) }, 503, []string{"no node offers the vm runtime or is bringing it up, and --runtime-fallback ns is not set"}},
	}
	for _, s := range steps {
		s.change()
		code, r := ready()
		if code != s.code || r.Ready != (s.code == 200) || strings.Join(r.NotReady, "; ") != strings.Join(s.notReady, "; ") {
			t.Errorf("%s: HTTP %d %+v, want %d not ready %q", s.name, code, r, s.code, s.notReady)
		}
		healthy()
	}
}

// TestNoNodeAfterWarmup: once the server has warmed up, a create with no
// live node at all is answered at once (an outage), not held for a node.
func TestNoNodeAfterWarmup(t *testing.T) {
	for _, rt := range []string{"ns", "auto"} {
		cp := newControlPlane(t, Config{DefaultRuntime: rt, WarmupWait: 3 * service.WarmupPoll})
		time.Sleep(4 * service.WarmupPoll) // warmed up
		if err := cp.st.DeleteNode(t.Context(), "n1"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		a := <-cp.createAsync(`{"template":"minimal"}`)
		// ns: the scheduler finds no node with room; auto: no node is
		// live to pick the runtime from.
		wantReason := map[string]string{"ns": "no_capacity", "auto": ""}[rt]
		if a.code != http.StatusServiceUnavailable || a.err.Code != sandboxv1.CodeUnavailable || a.err.Reason != wantReason {
			t.Errorf("%s: create with no node: HTTP %d %+v, want 503 unavailable, reason %q", rt, a.code, a.err, wantReason)
		}
		for _, e := range []string{"waiting for"} {
			if strings.Contains(a.err.Message, e) {
				t.Errorf("%s: create with no node after warm-up waited: %s (after %s)", rt, a.err.Message, time.Since(start))
			}
		}
	}
}

// TestPendingRuntimesFromHeartbeat: a heartbeat's pending runtimes are kept
// only for the runtime names the server knows, once each, and only while
// the heartbeat is recent.
func TestPendingRuntimesFromHeartbeat(t *testing.T) {
	n := NewNodes()
	n.observe("n1", nil, nil, []string{"vm", "bogus", "vm", strings.Repeat("x", 1<<16), "ns"}, nil, scheduler.Memory{})
	if got := n.pendingRuntimes("n1"); strings.Join(got, ",") != "vm,ns" {
		t.Errorf("pending %q, want vm,ns", got)
	}
	n.mu.Lock()
	o := n.observed["n1"]
	o.at = time.Now().Add(-2 * scheduler.HeartbeatTimeout)
	n.observed["n1"] = o
	n.mu.Unlock()
	if got := n.pendingRuntimes("n1"); len(got) != 0 {
		t.Errorf("pending %q from a stale heartbeat, want none", got)
	}
}

// FuzzHeartbeatPending: whatever a node's heartbeat says it is bringing up,
// the server keeps at most the runtime names it knows, once each.
func FuzzHeartbeatPending(f *testing.F) {
	f.Add([]byte(`{"address":"a","token":"t","runtimes":["ns"],"runtimes_pending":["vm"]}`))
	f.Add([]byte(`{"runtimes_pending":["vm","vm","ns","bogus",""]}`))
	f.Add([]byte(`{"runtimes_pending":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var hb nodeapiv1.Heartbeat
		if (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, &hb) != nil {
			return
		}
		got := knownRuntimes(hb.GetRuntimesPending())
		if len(got) > 2 {
			t.Fatalf("kept %q from %q: more than the two runtimes", got, hb.GetRuntimesPending())
		}
		for i, r := range got {
			if r != "vm" && r != "ns" || slices.Contains(got[:i], r) {
				t.Fatalf("kept %q from %q", got, hb.GetRuntimesPending())
			}
		}
	})
}

// TestRuntimeStatusFromHeartbeat: a heartbeat's status lines are kept for
// the runtimes the server knows, as printable ASCII of bounded length.
func TestRuntimeStatusFromHeartbeat(t *testing.T) {
	n := NewNodes()
	n.observe("n1", nil, nil, nil, map[string]string{
		"vm":     "q35 (Debian's cloud kernel); building the minimal kernel: compile: 3 objects\x1b[2J\r\n",
		"ns":     strings.Repeat("y", 5000),
		"bogus":  "not a runtime",
		"krun":   "", // known or not, an empty line is nothing
		"\x00vm": "x",
	}, scheduler.Memory{})
	got := n.RuntimeStatus()["n1"]
	want := map[string]string{
		"vm": "q35 (Debian's cloud kernel); building the minimal kernel: compile: 3 objects[2J",
		"ns": strings.Repeat("y", maxRuntimeStatus),
	}
	if !maps.Equal(got, want) {
		t.Errorf("status %q, want %q", got, want)
	}
	n.observe("n1", nil, nil, nil, nil, scheduler.Memory{})
	if got := n.RuntimeStatus()["n1"]; got != nil {
		t.Errorf("after a heartbeat without status: %q", got)
	}
}

// heldHeartbeats is a store whose RecordHeartbeat of a node that starts
// offering vm waits until release is closed, after saying so on held.
type heldHeartbeats struct {
	store.Store
	held, release chan struct{}
}

func (s *heldHeartbeats) RecordHeartbeat(ctx context.Context, n store.Node) (store.NodeState, error) {
	if slices.Contains(n.Runtimes, "vm") {
		close(s.held)
		<-s.release
	}
	return s.Store.RecordHeartbeat(ctx, n)
}

// TestCreateWhileRuntimeBecomesOffered: the heartbeat in which a node
// stops bringing vm up and starts offering it is not in the store yet
// while the server already knows vm is no longer pending; a create in
// that window waits for the store, never refuses with "no vm runtime"
// (TestCreateAtHealthzVM saw it once under load).
func TestCreateWhileRuntimeBecomesOffered(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	held := &heldHeartbeats{Store: st, held: make(chan struct{}), release: make(chan struct{})}
	cp := newControlPlaneOn(t, Config{DefaultRuntime: "auto"}, io.Discard, held)
	var once sync.Once
	release := func() { once.Do(func() { close(held.release) }) }
	t.Cleanup(release) // before the server's cleanup, which waits for the held heartbeat
	cp.beat([]string{"ns"}, []string{"vm"})
	beaten := make(chan struct{})
	go func() {
		defer close(beaten)
		cp.beat([]string{"ns", "vm"}, nil)
	}()
	<-held.held
	ch := cp.createAsync(`{"template":"minimal"}`)
	stillWaiting(t, ch)
	release()
	<-beaten
	a := <-ch
	if a.code != http.StatusCreated || a.sb.Runtime != "vm" {
		t.Fatalf("create while the node's new runtimes were being recorded: HTTP %d runtime %q %+v, want 201 on vm", a.code, a.sb.Runtime, a.err)
	}
}
