package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// egressNode is a node-api that starts every execution at once and records
// what it was asked: the StartExecution bodies and the egress pushes.
type egressNode struct {
	failPush atomic.Bool // answer PUT .../egress with 503
	// guest, when set, answers every guest request with 200 {} (the
	// authorization matrix only needs the request to get through).
	guest atomic.Bool

	mu     sync.Mutex // guards starts, pushes and stopped
	starts []nodev1.StartExecution
	pushes []pushed
	// stopped are the executions deleted (exec id -> true).
	stopped map[string]bool
}

// running lists the executions started and not deleted, as a node's
// heartbeat reports them.
func (n *egressNode) running() []nodev1.Execution {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []nodev1.Execution
	for _, req := range n.starts {
		if !n.stopped[req.ExecID] {
			out = append(out, nodev1.Execution{ExecID: req.ExecID, SandboxID: req.SandboxID, Generation: req.Generation,
				ActivationID: req.ActivationID, Runtime: req.Runtime, Template: req.Template, State: nodev1.ExecRunning})
		}
	}
	return out
}

type pushed struct {
	exec   string
	egress json.RawMessage
}

func (n *egressNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mux := http.NewServeMux()
	fake := &fakeNodeAPI{
		start: func(req nodev1.StartExecution) (*nodev1.Execution, error) {
			n.mu.Lock()
			n.starts = append(n.starts, req)
			n.mu.Unlock()
			return &nodev1.Execution{ExecID: req.ExecID, SandboxID: req.SandboxID, Generation: req.Generation,
				ActivationID: req.ActivationID, Runtime: req.Runtime, Template: req.Template, State: nodev1.ExecRunning, StartedAt: time.Now()}, nil
		},
		setEgress: func(exec string, policy json.RawMessage) error {
			if n.failPush.Load() {
				return fmt.Errorf("%w: gateway restarting", errdefs.ErrUnavailable)
			}
			n.mu.Lock()
			n.pushes = append(n.pushes, pushed{exec: exec, egress: policy})
			n.mu.Unlock()
			return nil
		},
		stop: func(exec string) error {
			n.mu.Lock()
			if n.stopped == nil {
				n.stopped = map[string]bool{}
			}
			n.stopped[exec] = true
			n.mu.Unlock()
			return nil
		},
	}
	if n.guest.Load() {
		mux.HandleFunc("/node/v1/executions/{exec}/guest/{rest...}", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{})
		})
		none := func(string) error { return nil }
		fake.deleteSnapshot, fake.pause, fake.resume = none, none, none
		fake.snapshot = func(_ string, req nodev1.TakeSnapshot) (*nodev1.Snapshot, error) {
			return &nodev1.Snapshot{ID: req.SnapshotID, Kind: req.Kind, Runtime: "ns", CreatedAt: time.Now(), SizeBytes: 1}, nil
		}
	}
	fake.mount(mux)
	mux.ServeHTTP(w, r)
}

func (n *egressNode) lastStart(t *testing.T, sandboxID string) nodev1.StartExecution {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := len(n.starts) - 1; i >= 0; i-- {
		if n.starts[i].SandboxID == sandboxID {
			return n.starts[i]
		}
	}
	t.Fatalf("the node was never asked to start sandbox %s", sandboxID)
	return nodev1.StartExecution{}
}

func (n *egressNode) pushList() []pushed {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]pushed(nil), n.pushes...)
}

// controlPlane is a real server, store and reconciler with one fake node,
// and an API key in each of two tenants.
type controlPlane struct {
	t          *testing.T
	st         store.Store
	url        string
	node       *egressNode
	tenant     string
	key, other string
	// nodeCred is node n1's own credential, from its heartbeat answer.
	nodeCred string
	// nodeAddr is where n1 (node) listens.
	nodeAddr string
	// nodes is the control plane's node registry.
	nodes *Nodes
}

const testJoinToken = "join-token-for-egress-tests-0123456789"

func newControlPlane(t *testing.T, cfg Config) *controlPlane {
	t.Helper()
	return newControlPlaneLog(t, cfg, io.Discard)
}

// newControlPlaneLog is newControlPlane logging to logOut.
func newControlPlaneLog(t *testing.T, cfg Config, logOut io.Writer) *controlPlane {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	return newControlPlaneOn(t, cfg, logOut, st)
}

// newControlPlaneOn is newControlPlaneLog on the given store, which it
// closes at cleanup.
func newControlPlaneOn(t *testing.T, cfg Config, logOut io.Writer, st store.Store) *controlPlane {
	t.Helper()
	ctx := t.Context()
	cp := &controlPlane{t: t, st: st, node: &egressNode{}}
	var keys [2]string
	for i, name := range []string{"acme", "other"} {
		tn := store.Tenant{ID: sandbox.NewTenantID(), Name: name, CreatedAt: time.Now().UTC()}
		if err := st.CreateTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			cp.tenant = tn.ID
		}
		var err error
		if _, keys[i], err = service.MintKey(ctx, st, tn.ID, false); err != nil {
			t.Fatal(err)
		}
	}
	cp.key, cp.other = keys[0], keys[1]
	if err := st.CreateTemplate(ctx, store.Template{Name: "minimal", Source: "builtin:minimal", State: store.TemplateReady}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelDebug}))
	nodes := NewNodes()
	rec := reconcile.New(reconcile.Config{Resync: 50 * time.Millisecond}, st, func(id string) (reconcile.NodeAPI, error) {
		return nodes.Client(id)
	}, log)
	cfg.JoinToken, cfg.CreateTimeout = testJoinToken, time.Minute
	if cfg.DefaultRuntime == "" {
		cfg.DefaultRuntime = "ns"
	}
	srv := New(cfg, st, nodes, rec, log)
	cp.nodes = nodes
	api := httptest.NewServer(srv.Handler())
	nodeSrv := httptest.NewServer(cp.node)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rec.Run(runCtx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		api.Close()
		nodeSrv.Close()
		st.Close()
	})
	cp.url = api.URL
	cp.nodeAddr = strings.TrimPrefix(nodeSrv.URL, "http://")
	reply, err := heartbeatVia(t.Context(), nil, api.URL, "n1", testHeartbeat{Address: cp.nodeAddr, Token: "node-token",
		Runtimes: []string{"ns"}, CPUs: 64, MemoryMiB: 1 << 20, DiskMiB: 1 << 30})
	if err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	cp.nodeCred = reply.GetNodeCredential()
	return cp
}

// with returns cp reporting to t (a subtest).
func (cp *controlPlane) with(t *testing.T) *controlPlane {
	c := *cp
	c.t = t
	return &c
}

// do sends a request with key and decodes a JSON answer into out (when
// not nil); it returns the status and, for errors, the API error.
func (cp *controlPlane) do(key, method, path, body string, out any) (int, sandboxv1.Error) {
	cp.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, cp.url+path, rd)
	if err != nil {
		cp.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cp.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var apiErr sandboxv1.Error
	if resp.StatusCode >= 300 {
		_ = json.Unmarshal(b, &apiErr)
		return resp.StatusCode, apiErr
	}
	if out != nil {
		reflect.ValueOf(out).Elem().SetZero() // a reused variable must not keep old fields
		if err := json.Unmarshal(b, out); err != nil {
			cp.t.Fatalf("%s %s: answer %s: %v", method, path, b, err)
		}
	}
	return resp.StatusCode, apiErr
}

// create creates a sandbox from body and fails the test unless it runs.
func (cp *controlPlane) create(body string) sandboxv1.Sandbox {
	cp.t.Helper()
	var sb sandboxv1.Sandbox
	if code, e := cp.do(cp.key, http.MethodPost, "/v1/sandboxes", body, &sb); code != http.StatusCreated {
		cp.t.Fatalf("create %s: HTTP %d %+v", body, code, e)
	}
	return sb
}

// specOf parses JSON policy text into its normalised Spec.
func specOf(t *testing.T, js []byte) egress.Spec {
	t.Helper()
	p, err := egress.ParsePolicy(js)
	if err != nil {
		t.Fatalf("policy %s: %v", js, err)
	}
	return p.Spec()
}

func apiSpec(t *testing.T, p *sandboxv1.EgressPolicy) egress.Spec {
	t.Helper()
	if p == nil {
		t.Fatal("no egress policy in the answer")
	}
	b, _ := json.Marshal(p)
	return specOf(t, b)
}

func TestCreateWithEgress(t *testing.T) {
	def := `{"allow_internet":false,"allow":{"domains":["example.com"]}}`
	defPolicy, _ := egress.ParsePolicy([]byte(def))
	cp := newControlPlane(t, Config{DefaultEgress: defPolicy})
	for _, tc := range []struct {
		name, body, want string
	}{
		{"no policy: the server's default", `{"template":"minimal"}`, def},
		{"own policy", `{"template":"minimal","egress":{"allow_internet":true,"deny":{"ports":["25"],"domains":["evil.example.com"]}}}`,
			`{"allow_internet":true,"deny":{"ports":["25"],"domains":["evil.example.com"]}}`},
		{"E2B shorthand", `{"template":"minimal","allow_internet_access":false}`, `{"allow_internet":false}`},
		{"shorthand agreeing with the policy", `{"template":"minimal","allow_internet_access":true,"egress":{"allow_internet":true}}`, `{"allow_internet":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := cp.with(t)
			sb := cp.create(tc.body)
			want := specOf(t, []byte(tc.want))
			if got := apiSpec(t, sb.Egress); !reflect.DeepEqual(got, want) {
				t.Errorf("create answered egress %+v, want %+v", got, want)
			}
			var got sandboxv1.Sandbox
			cp.do(cp.key, http.MethodGet, "/v1/sandboxes/"+sb.ID, "", &got)
			if g := apiSpec(t, got.Egress); !reflect.DeepEqual(g, want) {
				t.Errorf("GET egress %+v, want %+v", g, want)
			}
			start := cp.node.lastStart(t, sb.ID)
			if start.TenantID != cp.tenant {
				t.Errorf("StartExecution.TenantID = %q, want %q", start.TenantID, cp.tenant)
			}
			if g := specOf(t, start.Egress); !reflect.DeepEqual(g, want) {
				t.Errorf("StartExecution.Egress = %s, want %+v", start.Egress, want)
			}
		})
	}
}

func TestCreateWithoutFlagAllowsTheInternet(t *testing.T) {
	cp := newControlPlane(t, Config{})
	sb := cp.create(`{"template":"minimal"}`)
	if got := apiSpec(t, sb.Egress); !reflect.DeepEqual(got, specOf(t, []byte(`{"allow_internet":true}`))) {
		t.Errorf("default egress = %+v, want allow_internet only", got)
	}
}

func TestCreateRejectsBadEgress(t *testing.T) {
	cp := newControlPlane(t, Config{})
	for _, tc := range []struct{ name, body, msg string }{
		{"bad CIDR", `{"template":"minimal","egress":{"allow":{"cidrs":["10.0.0.1/8"]}}}`, "allow.cidrs[0]"},
		{"bad port", `{"template":"minimal","egress":{"deny":{"ports":["0"]}}}`, "deny.ports[0]"},
		{"uppercase domain", `{"template":"minimal","egress":{"allow":{"domains":["Example.com"]}}}`, "allow.domains[0]"},
		{"unknown field", `{"template":"minimal","egress":{"alow":{"domains":["a.com"]}}}`, `unknown field "alow"`},
		{"wrong type", `{"template":"minimal","egress":{"allow_internet":"yes"}}`, "egress policy"},
		{"not an object", `{"template":"minimal","egress":[]}`, "egress policy"},
		{"shorthand contradicts", `{"template":"minimal","allow_internet_access":false,"egress":{"allow_internet":true}}`, "contradicts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, e := cp.with(t).do(cp.key, http.MethodPost, "/v1/sandboxes", tc.body, nil)
			if code != http.StatusBadRequest || e.Code != sandboxv1.CodeInvalidArgument || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("HTTP %d %+v, want 400 invalid_argument mentioning %q", code, e, tc.msg)
			}
		})
	}
	var list sandboxv1.SandboxList
	cp.do(cp.key, http.MethodGet, "/v1/sandboxes", "", &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("refused creates left %d sandboxes", len(list.Sandboxes))
	}
}

func TestGetAndSetEgress(t *testing.T) {
	cp := newControlPlane(t, Config{})
	sb := cp.create(`{"template":"minimal","egress":{"allow_internet":false}}`)
	path := "/v1/sandboxes/" + sb.ID + "/egress"

	var got sandboxv1.EgressPolicy
	if code, e := cp.do(cp.key, http.MethodGet, path, "", &got); code != http.StatusOK || got.AllowInternet {
		t.Fatalf("GET = HTTP %d %+v %+v, want the created policy", code, e, got)
	}

	// PUT stores the policy and pushes it to the running execution.
	next := `{"allow_internet":false,"allow":{"domains":["*.pypi.org","pypi.org"],"ports":["443"]}}`
	if code, e := cp.do(cp.key, http.MethodPut, path, next, &got); code != http.StatusOK {
		t.Fatalf("PUT = HTTP %d %+v", code, e)
	}
	want := specOf(t, []byte(next))
	if g := apiSpec(t, &got); !reflect.DeepEqual(g, want) {
		t.Errorf("PUT answered %+v, want %+v", g, want)
	}
	pushes := cp.node.pushList()
	if len(pushes) != 1 || pushes[0].exec != cp.node.lastStart(t, sb.ID).ExecID || !reflect.DeepEqual(specOf(t, pushes[0].egress), want) {
		t.Fatalf("node got pushes %+v, want one of %s to the running execution", pushes, next)
	}
	cp.do(cp.key, http.MethodGet, path, "", &got)
	if g := apiSpec(t, &got); !reflect.DeepEqual(g, want) {
		t.Errorf("GET after PUT = %+v, want %+v", g, want)
	}

	// A bad policy is refused and changes nothing.
	code, e := cp.do(cp.key, http.MethodPut, path, `{"allow":{"domains":["*"]}}`, nil)
	if code != http.StatusBadRequest || !strings.Contains(e.Message, "allow.domains[0]") {
		t.Errorf("PUT of a bad policy = HTTP %d %+v, want 400 naming allow.domains[0]", code, e)
	}
	if code, _ := cp.do(cp.key, http.MethodPut, path, `{"allow_internet":true}{}`, nil); code != http.StatusBadRequest {
		t.Errorf("PUT with trailing data = HTTP %d, want 400", code)
	}
	if code, _ := cp.do(cp.key, http.MethodPut, path, `{"deny":{"domains":["`+strings.Repeat("a", egress.MaxPolicyBytes)+`"]}}`, nil); code != http.StatusRequestEntityTooLarge {
		t.Errorf("PUT of an oversized policy = HTTP %d, want 413", code)
	}
	cp.do(cp.key, http.MethodGet, path, "", &got)
	if g := apiSpec(t, &got); !reflect.DeepEqual(g, want) {
		t.Errorf("a refused PUT changed the policy to %+v", g)
	}

	// The node cannot take it: 503, and the stored policy stays the new one.
	cp.node.failPush.Store(true)
	third := `{"allow_internet":true,"deny":{"ports":["25"]}}`
	code, e = cp.do(cp.key, http.MethodPut, path, third, nil)
	if code != http.StatusServiceUnavailable || e.Code != sandboxv1.CodeUnavailable ||
		!strings.Contains(e.Message, "applies at the next start") || !strings.Contains(e.Message, "still has the previous one") {
		t.Errorf("PUT with the node failing = HTTP %d %+v, want 503 saying what applies when", code, e)
	}
	cp.do(cp.key, http.MethodGet, path, "", &got)
	if g := apiSpec(t, &got); !reflect.DeepEqual(g, specOf(t, []byte(third))) {
		t.Errorf("after a failed push the stored policy is %+v, want the new one kept", g)
	}
	var events sandboxv1.EventList
	cp.do(cp.key, http.MethodGet, "/v1/sandboxes/"+sb.ID+"/events", "", &events)
	if !hasEvent(events, "egress", "not applied") {
		t.Errorf("no event tells that the push failed: %+v", events.Events)
	}
}

func hasEvent(list sandboxv1.EventList, typ, substr string) bool {
	for _, e := range list.Events {
		if e.Type == typ && strings.Contains(e.Message, substr) {
			return true
		}
	}
	return false
}

func TestSetEgressWithoutExecution(t *testing.T) {
	cp := newControlPlane(t, Config{})
	sb := cp.create(`{"template":"minimal"}`)
	// Stopped: nothing runs, so nothing is pushed; the policy applies at the
	// next start.
	rec, err := cp.st.GetSandboxByID(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	rec.State, rec.Desired = sandbox.StateStopped, sandbox.StateStopped
	if err := cp.st.UpdateSandbox(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	var got sandboxv1.EgressPolicy
	if code, e := cp.do(cp.key, http.MethodPut, "/v1/sandboxes/"+sb.ID+"/egress", `{"allow_internet":false}`, &got); code != http.StatusOK || got.AllowInternet {
		t.Fatalf("PUT on a stopped sandbox = HTTP %d %+v %+v", code, e, got)
	}
	if p := cp.node.pushList(); len(p) != 0 {
		t.Errorf("a stopped sandbox's policy was pushed: %+v", p)
	}
	if rec, _ = cp.st.GetSandboxByID(t.Context(), sb.ID); rec.Egress == nil || rec.Egress.Spec().AllowInternet {
		t.Errorf("stored policy = %v, want allow_internet false", rec.Egress)
	}
}

// TestSetEgressWhileStarting: a PUT that lands while the sandbox's
// execution is being started waits for it, so the execution ends with the
// new policy whichever one its StartExecution carried.
func TestSetEgressWhileStarting(t *testing.T) {
	cp := newControlPlane(t, Config{})
	first, _ := egress.ParsePolicy([]byte(`{"allow_internet":true}`))
	sb := sandbox.New(cp.tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256, DiskMiB: 512, Egress: first}, time.Now())
	sb.Node = "n1"
	if err := cp.st.CreateSandbox(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
	// The reconciler finds it on its next resync.
	next := `{"allow_internet":false,"allow":{"domains":["example.com"]}}`
	if code, e := cp.do(cp.key, http.MethodPut, "/v1/sandboxes/"+sb.ID+"/egress", next, nil); code != http.StatusOK {
		t.Fatalf("PUT while creating = HTTP %d %+v", code, e)
	}
	want := specOf(t, []byte(next))
	start := cp.node.lastStart(t, sb.ID)
	pushes := cp.node.pushList()
	final := specOf(t, start.Egress)
	if len(pushes) > 0 {
		if last := pushes[len(pushes)-1]; last.exec == start.ExecID {
			final = specOf(t, last.egress)
		}
	}
	if !reflect.DeepEqual(final, want) {
		t.Errorf("the execution ends with %+v (start %s, pushes %+v), want %+v", final, start.Egress, pushes, want)
	}
}

func TestEgressTenancy(t *testing.T) {
	cp := newControlPlane(t, Config{})
	sb := cp.create(`{"template":"minimal","egress":{"allow_internet":false}}`)
	path := "/v1/sandboxes/" + sb.ID + "/egress"
	for _, tc := range []struct{ method, body string }{
		{http.MethodGet, ""},
		{http.MethodPut, `{"allow_internet":true}`},
	} {
		if code, e := cp.do(cp.other, tc.method, path, tc.body, nil); code != http.StatusNotFound || e.Code != sandboxv1.CodeNotFound {
			t.Errorf("%s by another tenant = HTTP %d %+v, want 404", tc.method, code, e)
		}
	}
	if code, _ := cp.do(cp.key, http.MethodGet, "/v1/sandboxes/nosuchsandbox0000000/egress", "", nil); code != http.StatusNotFound {
		t.Errorf("GET of a missing sandbox = HTTP %d, want 404", code)
	}
	var got sandboxv1.EgressPolicy
	cp.do(cp.key, http.MethodGet, path, "", &got)
	if got.AllowInternet || len(cp.node.pushList()) != 0 {
		t.Errorf("another tenant's PUT changed the policy (%+v) or reached the node", got)
	}
}

// TestForkInheritsEgress: a fork starts with its parent's policy and keeps
// it as its own.
func TestForkInheritsEgress(t *testing.T) {
	cp := newControlPlane(t, Config{})
	policy := `{"allow_internet":false,"allow":{"cidrs":["10.1.0.0/16"]}}`
	parent := cp.create(`{"template":"minimal","egress":` + policy + `}`)
	rec, err := cp.st.GetSandboxByID(t.Context(), parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	snap := store.Snapshot{ID: sandbox.NewSnapshotID(), SandboxID: parent.ID, Tenant: cp.tenant, Kind: store.SnapshotDisk,
		Tier: "manual", State: store.SnapshotReady, Node: "n1", Runtime: "ns", Template: "minimal", CPUs: rec.CPUs,
		MemoryMiB: rec.MemoryMiB, Generation: rec.Generation, CreatedAt: time.Now().UTC()}
	if err := cp.st.CreateSnapshot(t.Context(), snap); err != nil {
		t.Fatal(err)
	}
	var child sandboxv1.Sandbox
	if code, e := cp.do(cp.key, http.MethodPost, "/v1/sandboxes/"+parent.ID+"/fork", `{"snapshot":"`+snap.ID+`"}`, &child); code != http.StatusCreated {
		t.Fatalf("fork = HTTP %d %+v", code, e)
	}
	want := specOf(t, []byte(policy))
	if got := apiSpec(t, child.Egress); !reflect.DeepEqual(got, want) {
		t.Errorf("fork's egress = %+v, want the parent's %+v", got, want)
	}
	start := cp.node.lastStart(t, child.ID)
	if start.Snapshot != snap.ID || start.TenantID != cp.tenant || !reflect.DeepEqual(specOf(t, start.Egress), want) {
		t.Errorf("fork's StartExecution = snapshot %s tenant %s egress %s; want %s, %s, the parent's policy",
			start.Snapshot, start.TenantID, start.Egress, snap.ID, cp.tenant)
	}
	if stored, _ := cp.st.GetSandboxByID(t.Context(), child.ID); stored.Egress == nil {
		t.Error("the fork's policy is not stored as its own")
	}
}

// TestSandboxWithoutOwnPolicy: a sandbox recorded before egress policies
// reports, and follows, the server's default.
func TestSandboxWithoutOwnPolicy(t *testing.T) {
	def, _ := egress.ParsePolicy([]byte(`{"allow_internet":false,"allow":{"domains":["example.com"]}}`))
	cp := newControlPlane(t, Config{DefaultEgress: def})
	old := sandbox.New(cp.tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256, DiskMiB: 512}, time.Now())
	old.State, old.Desired = sandbox.StateStopped, sandbox.StateStopped
	if err := cp.st.CreateSandbox(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	var got sandboxv1.EgressPolicy
	cp.do(cp.key, http.MethodGet, "/v1/sandboxes/"+old.ID+"/egress", "", &got)
	if g := apiSpec(t, &got); !reflect.DeepEqual(g, def.Spec()) {
		t.Errorf("GET egress of a pre-policy sandbox = %+v, want the server default", g)
	}
	var sb sandboxv1.Sandbox
	cp.do(cp.key, http.MethodGet, "/v1/sandboxes/"+old.ID, "", &sb)
	if g := apiSpec(t, sb.Egress); !reflect.DeepEqual(g, def.Spec()) {
		t.Errorf("GET sandbox of a pre-policy sandbox shows egress %+v, want the server default", g)
	}
}

// TestTemplateDefaultEgress: a template's default policy applies to the
// sandboxes made from it that name none; a create's own policy wins; only an
// admin sets it; a bad policy is refused.
func TestTemplateDefaultEgress(t *testing.T) {
	cp := newControlPlane(t, Config{})
	_, admin, err := service.MintKey(t.Context(), cp.st, cp.tenant, true)
	if err != nil {
		t.Fatal(err)
	}
	policy := `{"allow_internet":false,"allow":{"domains":["pypi.org","*.pythonhosted.org"]}}`
	if code, e := cp.do(cp.key, http.MethodPut, "/v1/templates/minimal/egress", policy, nil); code != http.StatusForbidden {
		t.Fatalf("a tenant key set a template policy: HTTP %d %+v", code, e)
	}
	if code, e := cp.do(admin, http.MethodPut, "/v1/templates/minimal/egress", `{"alow":{}}`, nil); code != http.StatusBadRequest {
		t.Fatalf("bad template policy: HTTP %d %+v", code, e)
	}
	var tpl sandboxv1.Template
	if code, e := cp.do(admin, http.MethodPut, "/v1/templates/minimal/egress", policy, &tpl); code != http.StatusOK {
		t.Fatalf("set template policy: HTTP %d %+v", code, e)
	}
	want := specOf(t, []byte(policy))
	if got := apiSpec(t, tpl.Egress); !reflect.DeepEqual(got, want) {
		t.Errorf("template egress %+v, want %+v", got, want)
	}
	var list sandboxv1.TemplateList
	cp.do(cp.key, http.MethodGet, "/v1/templates", "", &list)
	if len(list.Templates) != 1 || list.Templates[0].Egress == nil {
		t.Errorf("GET /v1/templates does not show the policy: %+v", list)
	}
	sb := cp.create(`{"template":"minimal"}`)
	if got := apiSpec(t, sb.Egress); !reflect.DeepEqual(got, want) {
		t.Errorf("sandbox without a policy got %+v, want the template's %+v", got, want)
	}
	if g := specOf(t, cp.node.lastStart(t, sb.ID).Egress); !reflect.DeepEqual(g, want) {
		t.Errorf("StartExecution.Egress %+v, want the template's", g)
	}
	own := cp.create(`{"template":"minimal","egress":{"allow_internet":true}}`)
	if got := apiSpec(t, own.Egress); !reflect.DeepEqual(got, specOf(t, []byte(`{"allow_internet":true}`))) {
		t.Errorf("a create's own policy lost to the template's: %+v", got)
	}
	// null removes the default: the server's applies again.
	if code, e := cp.do(admin, http.MethodPut, "/v1/templates/minimal/egress", `null`, &tpl); code != http.StatusOK || tpl.Egress != nil {
		t.Fatalf("clear template policy: HTTP %d %+v %+v", code, e, tpl)
	}
	after := cp.create(`{"template":"minimal"}`)
	if got := apiSpec(t, after.Egress); !reflect.DeepEqual(got, specOf(t, []byte(`{"allow_internet":true}`))) {
		t.Errorf("after clearing, default %+v", got)
	}
	if code, _ := cp.do(admin, http.MethodPut, "/v1/templates/nope/egress", policy, nil); code != http.StatusNotFound {
		t.Errorf("unknown template: HTTP %d", code)
	}
}
