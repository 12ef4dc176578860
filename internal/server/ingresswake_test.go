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
	"strings"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// lifecycleNode is a portNode that also starts, pauses, resumes and stops
// executions, installing the identity of every execution it starts.
func lifecycleNode(n *portNode) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/node/v1/executions/{exec}/ports/{port}/{rest...}", n.handler())
	none := func(string) error { return nil }
	fake := &fakeNodeAPI{
		start: func(req nodev1.StartExecution) (*nodev1.Execution, error) {
			n.install(req.ExecID, capability.Identity{Sandbox: req.SandboxID, Generation: req.Generation, Node: "n1", Substrate: req.Runtime, Activation: req.ActivationID})
			return &nodev1.Execution{ExecID: req.ExecID, SandboxID: req.SandboxID, Generation: req.Generation,
				ActivationID: req.ActivationID, Runtime: req.Runtime, Template: req.Template, State: nodev1.ExecRunning, StartedAt: time.Now()}, nil
		},
		pause: none, resume: none, stop: none,
	}
	fake.mount(mux)
	return mux
}

// TestIngressWakesIdleSandbox: ingress to a sandbox paused by its idle
// policy resumes it first, then reaches the port with a capability for
// its execution.
func TestIngressWakesIdleSandbox(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "acme", CreatedAt: time.Now().UTC()}
	if err := st.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	_, key, err := service.MintKey(ctx, st, tn.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTemplate(ctx, store.Template{Name: "minimal", Source: "builtin:minimal", State: store.TemplateReady}); err != nil {
		t.Fatal(err)
	}
	signer, keys := testSigner(t)
	node := &portNode{t: t, keys: keys, installed: map[string]capability.Identity{}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	nodes := NewNodes()
	rec := reconcile.New(reconcile.Config{Resync: 50 * time.Millisecond}, st, func(id string) (reconcile.NodeAPI, error) { return nodes.Client(id) }, log)
	srv := New(Config{Signer: signer, Keys: keys, JoinToken: testJoinToken, DefaultRuntime: "ns", CreateTimeout: time.Minute}, st, nodes, rec, log)
	api := httptest.NewServer(srv.Handler())
	defer api.Close()
	nodeSrv := httptest.NewServer(lifecycleNode(node))
	defer nodeSrv.Close()
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rec.Run(runCtx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	hb := testHeartbeat{Address: strings.TrimPrefix(nodeSrv.URL, "http://"), Token: "node-token",
		Runtimes: []string{"ns"}, CPUs: 64, MemoryMiB: 1 << 20, DiskMiB: 1 << 30}
	call := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, api.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if _, err := heartbeatVia(ctx, nil, api.URL, "n1", hb); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	code, b := call(http.MethodPost, "/v1/sandboxes", `{"template":"minimal","runtime":"ns","idle_timeout":"10m"}`)
	var sb sandboxv1.Sandbox
	if code != http.StatusCreated || json.Unmarshal(b, &sb) != nil {
		t.Fatalf("create: HTTP %d %s", code, b)
	}
	if code, b := call(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/ports", `{"port":8080,"public":true}`); code != http.StatusCreated {
		t.Fatalf("expose: HTTP %d %s", code, b)
	}
	if code, b := call(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/pause", ""); code >= 300 {
		t.Fatalf("pause: HTTP %d %s", code, b)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		cur, err := st.GetSandboxByID(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if cur.State == sandbox.StatePaused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox is %s, want paused", cur.State)
		}
		time.Sleep(20 * time.Millisecond)
	}

	req, _ := http.NewRequest(http.MethodGet, api.URL+"/hello", nil)
	req.Host = fmt.Sprintf("8080-%s.localhost", sb.ID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Guest") != "yes" {
		t.Fatalf("ingress to a paused idle sandbox: HTTP %d %s, want the guest's answer", resp.StatusCode, body)
	}
	cur, err := st.GetSandboxByID(ctx, sb.ID)
	if err != nil || cur.State != sandbox.StateRunning {
		t.Fatalf("after ingress the sandbox is %v (%v), want running", cur.State, err)
	}
	if c := node.lastCapability(); c == nil || c.Identity != identityOf(cur) || c.Port != 8080 || c.Protocol != "http" {
		t.Errorf("capability %+v, want one for %+v port 8080 http", c, identityOf(cur))
	}
}
