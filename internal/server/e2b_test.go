package server

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
	nodev1 "github.com/spacesandbox/space/api/node/v1"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/bridge"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/e2bapi"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/guestd"
	"github.com/spacesandbox/space/internal/nodeclient"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// guestNode is a node-api serving the guest route the way a node does: it
// checks the node token and the capability (signature, the operation the
// path needs, the installed execution), then a "guest" echoes the request.
type guestNode struct {
	keys      *capability.KeySet
	mu        sync.Mutex                     // guards installed and seen
	installed map[string]capability.Identity // exec id -> identity
	seen      []*capability.Capability
	// guest, when set, serves the guest requests that pass the checks
	// (else they are echoed).
	guest http.Handler
}

func (n *guestNode) handler() http.Handler {
	mux := http.NewServeMux()
	// Stats: every execution uses half a CPU and 100 MiB of its 256.
	born := time.Now()
	fake := &fakeNodeAPI{token: "node-token", stats: func(exec string) (*nodev1.ExecStats, error) {
		n.mu.Lock()
		_, ok := n.installed[exec]
		n.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("%w: no such execution", errdefs.ErrNotFound)
		}
		now := time.Now()
		return &nodev1.ExecStats{Time: now, CPUNanos: uint64(now.Sub(born).Nanoseconds() / 2), CPUs: 1,
			MemoryBytes: 100 << 20, MemoryLimitBytes: 256 << 20, Pids: 3, DiskBytes: 10 << 20, DiskLimitBytes: 2048 << 20}, nil
	}}
	fake.mount(mux)
	mux.HandleFunc("/node/v1/executions/{exec}/guest/{rest...}", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(nodeclient.TokenHeader) != "node-token" {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"code": "unauthenticated"})
			return
		}
		tok, err := capability.Decode(r.Header.Get(capability.Header))
		var c *capability.Capability
		if err == nil {
			c, err = capability.Verify(tok, n.keys, time.Now())
		}
		if err != nil {
			writeJSON(w, http.StatusForbidden, map[string]string{"code": "permission_denied", "message": err.Error()})
			return
		}
		path := "/" + r.PathValue("rest")
		n.mu.Lock()
		n.seen = append(n.seen, c)
		installed, ok := n.installed[r.PathValue("exec")]
		n.mu.Unlock()
		if d, why := capability.Compare(c, installed, capability.Request{Op: bridge.GuestOp(path)}); !ok || d != capability.Allow {
			writeJSON(w, http.StatusForbidden, map[string]string{"code": "permission_denied", "message": why})
			return
		}
		r.Header.Del(capability.Header)
		n.mu.Lock()
		guest := n.guest
		n.mu.Unlock()
		if guest != nil {
			r.URL.Path, r.URL.RawPath = path, ""
			guest.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		w.Header().Set("X-Guest", "yes")
		writeJSON(w, http.StatusOK, echo{Method: r.Method, Path: path, Query: r.URL.RawQuery, Host: r.Host, Body: string(body), Header: r.Header})
	})
	return mux
}

func (n *guestNode) last() *capability.Capability {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.seen) == 0 {
		return nil
	}
	return n.seen[len(n.seen)-1]
}

// e2bPlane is a control plane without a reconciler over a real SQLite
// store, one fake node, and two tenants.
type e2bPlane struct {
	t           *testing.T
	st          *sqlite.Store
	srv         *Server
	url         string
	node        *guestNode
	tenant      string
	otherTenant string
	key, other  string
}

func newE2BPlane(t *testing.T) *e2bPlane {
	t.Helper()
	return newE2BPlaneWith(t, nil)
}

// newE2BPlaneWith is newE2BPlane with its server's Config changed by set.
func newE2BPlaneWith(t *testing.T, set func(*Config)) *e2bPlane {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	signer, keys := testSigner(t)
	p := &e2bPlane{t: t, st: st, node: &guestNode{keys: keys, installed: map[string]capability.Identity{}}}
	for i, name := range []string{"acme", "other"} {
		tn := store.Tenant{ID: sandbox.NewTenantID(), Name: name, CreatedAt: time.Now().UTC()}
		if err := st.CreateTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
		_, key, err := service.MintKey(ctx, st, tn.ID, false)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			p.tenant, p.key = tn.ID, key
		} else {
			p.otherTenant, p.other = tn.ID, key
		}
	}
	nodeSrv := httptest.NewServer(p.node.handler())
	t.Cleanup(nodeSrv.Close)
	nodes := NewNodes()
	if err := nodes.Register("node-a", strings.TrimPrefix(nodeSrv.URL, "http://"), "node-token"); err != nil {
		t.Fatal(err)
	}
	sealer, err := NewCASealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Signer: signer, Keys: keys, CASealer: sealer}
	if set != nil {
		set(&cfg)
	}
	p.srv = New(cfg, st, nodes, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	api := httptest.NewUnstartedServer(p.srv.Handler())
	api.Config.Protocols = apiProtocols() // as Run serves it
	api.Start()
	t.Cleanup(api.Close)
	p.url = api.URL
	return p
}

// sandbox records a sandbox of tenant in state on node-a, installed there.
func (p *e2bPlane) sandbox(tenant string, state sandbox.State, md map[string]string) *sandbox.Sandbox {
	p.t.Helper()
	sb := sandbox.New(tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256, Metadata: md}, time.Now())
	sb.State = state
	return p.installed(sb)
}

// installed records sb on node-a, in its first generation, installed there.
func (p *e2bPlane) installed(sb *sandbox.Sandbox) *sandbox.Sandbox {
	p.t.Helper()
	sb.Node, sb.Generation, sb.ActivationID = "node-a", 1, sandbox.NewActivationID()
	sb.ExecID = sandbox.NewExecID(sb.ID, 1)
	if err := p.st.CreateSandbox(p.t.Context(), sb); err != nil {
		p.t.Fatal(err)
	}
	p.node.mu.Lock()
	p.node.installed[sb.ExecID] = identityOf(sb)
	p.node.mu.Unlock()
	return sb
}

// send sends a request with Host host (when not empty) and headers.
func (p *e2bPlane) send(method, path, host, body string, headers map[string]string) answer {
	p.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, p.url+path, rd)
	if err != nil {
		p.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: string(b), header: resp.Header}
}

// envd sends an envd request routed by E2B's headers.
func (p *e2bPlane) envd(method, path, id, token string) answer {
	p.t.Helper()
	h := map[string]string{e2bapi.SandboxHeader: id, e2bapi.PortHeader: "49983"}
	if token != "" {
		h[e2bapi.TokenHeader] = token
	}
	return p.send(method, path, "", "{}", h)
}

func TestE2BEnvdProxy(t *testing.T) {
	p := newE2BPlane(t)
	a := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	b := p.sandbox(p.otherTenant, sandbox.StateRunning, nil)
	paused := p.sandbox(p.tenant, sandbox.StatePaused, nil)
	tokA, tokB := p.srv.e2bAPI.AccessToken(a.ID), p.srv.e2bAPI.AccessToken(b.ID)

	t.Run("forwarded with a capability for the path's operation", func(t *testing.T) {
		for path, op := range map[string]capability.Op{
			"/process.Process/Start": capability.OpExec, "/filesystem.Filesystem/ListDir": capability.OpFiles,
		} {
			got := guestSaw(t, p.envd(http.MethodPost, path, a.ID, tokA))
			if got.Path != path || got.Header.Get(e2bapi.TokenHeader) != "" || got.Header.Get(e2bapi.SandboxHeader) != "" || got.Header.Get(capability.Header) != "" {
				t.Errorf("%s: guest saw %+v, want the path without the token, routing or capability headers", path, got)
			}
			if got.Header.Get(filesystemv1.EnvdCompatHeader) != filesystemv1.EnvdCompatE2B {
				t.Errorf("%s: guest saw %s %q, want %q (envd's answers)", path, filesystemv1.EnvdCompatHeader, got.Header.Get(filesystemv1.EnvdCompatHeader), filesystemv1.EnvdCompatE2B)
			}
			if c := p.node.last(); c == nil || c.Identity != identityOf(a) || c.Ops != op {
				t.Errorf("%s: capability %+v, want %v for %+v", path, c, op, identityOf(a))
			}
		}
		got := guestSaw(t, p.send(http.MethodGet, "/files?path=%2Ftmp%2Fa&username=user", "", "",
			map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "49983", e2bapi.TokenHeader: tokA}))
		if got.Path != "/files" || got.Query != "path=%2Ftmp%2Fa&username=user" {
			t.Errorf("files: guest saw %s?%s", got.Path, got.Query)
		}
		got = guestSaw(t, p.send(http.MethodGet, "/health", "", "",
			map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "49983", e2bapi.TokenHeader: tokA, "e2b-traffic-access-token": p.srv.e2bAPI.TrafficToken(a.ID)}))
		if got.Header.Get(e2bapi.TrafficHeader) != "" {
			t.Errorf("health: the guest daemon saw the traffic token: %v", got.Header)
		}
	})
	t.Run("over HTTP/2 without TLS (h2c), as Connect clients speak it", func(t *testing.T) {
		protos := new(http.Protocols)
		protos.SetUnencryptedHTTP2(true)
		c := &http.Client{Transport: &http.Transport{Protocols: protos}}
		req, _ := http.NewRequest(http.MethodPost, p.url+"/process.Process/Start", strings.NewReader("{}"))
		req.Header.Set(e2bapi.SandboxHeader, a.ID)
		req.Header.Set(e2bapi.PortHeader, "49983")
		req.Header.Set(e2bapi.TokenHeader, tokA)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("h2c request: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
			t.Fatalf("h2c: %s %d %s, want HTTP/2 200 from the guest", resp.Proto, resp.StatusCode, body)
		}
		got := guestSaw(t, answer{status: resp.StatusCode, body: string(body), header: resp.Header})
		if got.Path != "/process.Process/Start" {
			t.Errorf("h2c: guest saw %s", got.Path)
		}
		// And a forged token is refused the same way over h2c.
		req, _ = http.NewRequest(http.MethodPost, p.url+"/process.Process/Start", strings.NewReader("{}"))
		req.Header.Set(e2bapi.SandboxHeader, a.ID)
		req.Header.Set(e2bapi.PortHeader, "49983")
		req.Header.Set(e2bapi.TokenHeader, tokB)
		resp2, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp2.Body.Close()
		if resp2.StatusCode != http.StatusUnauthorized {
			t.Errorf("h2c with another sandbox's token: HTTP %d, want 401", resp2.StatusCode)
		}
	})
	t.Run("envd /metrics answered from the node", func(t *testing.T) {
		got := p.envd(http.MethodGet, "/metrics", a.ID, tokA)
		var m e2bapi.EnvdMetrics
		if got.status != http.StatusOK || json.Unmarshal([]byte(got.body), &m) != nil {
			t.Fatalf("metrics: HTTP %d %s", got.status, got.body)
		}
		if got.header.Get("X-Guest") != "" || m.MemUsed != 100<<20 || m.MemTotalMiB != 256 || m.CPUCount != 1 || m.CPUUsedPct < 35 || m.CPUUsedPct > 65 {
			t.Errorf("metrics %+v (from the guest: %v), want the node's figures", m, got.header.Get("X-Guest") != "")
		}
		if got := p.envd(http.MethodGet, "/metrics", a.ID, tokB); got.status != http.StatusUnauthorized {
			t.Errorf("metrics with B's token: HTTP %d", got.status)
		}
		if got := p.envd(http.MethodGet, "/metrics", paused.ID, p.srv.e2bAPI.AccessToken(paused.ID)); got.status != http.StatusBadGateway {
			t.Errorf("metrics of a paused sandbox: HTTP %d %s, want 502", got.status, got.body)
		}
	})
	t.Run("routed by host", func(t *testing.T) {
		got := guestSaw(t, p.send(http.MethodGet, "/health", "49983-"+a.ID+".localhost", "", map[string]string{e2bapi.TokenHeader: tokA}))
		if got.Path != "/health" {
			t.Errorf("guest saw %s", got.Path)
		}
	})

	cases := []struct {
		name    string
		method  string
		path    string
		host    string
		headers map[string]string
		status  int
	}{
		{"no token", "POST", "/process.Process/Start", "", map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "49983"}, 401},
		{"forged token", "POST", "/process.Process/Start", "", map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "49983", e2bapi.TokenHeader: strings.Repeat("ab", 32)}, 401},
		{"token of another sandbox", "POST", "/process.Process/Start", "", map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "49983", e2bapi.TokenHeader: tokB}, 401},
		{"B's token on A by host", "GET", "/health", "49983-" + a.ID + ".localhost", map[string]string{e2bapi.TokenHeader: tokB}, 401},
		{"token prefix", "GET", "/health", "", map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "49983", e2bapi.TokenHeader: tokA[:32]}, 401},
		{"host and header disagree on the sandbox", "GET", "/health", "49983-" + a.ID + ".localhost", map[string]string{e2bapi.SandboxHeader: b.ID, e2bapi.PortHeader: "49983", e2bapi.TokenHeader: tokB}, 400},
		{"host and header disagree on the port", "GET", "/health", "49983-" + a.ID + ".localhost", map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "8080", e2bapi.TokenHeader: tokA}, 400},
		{"id without port", "GET", "/health", "", map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.TokenHeader: tokA}, 400},
		{"bad port", "GET", "/health", "", map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "99999", e2bapi.TokenHeader: tokA}, 400},
		{"guest control service", "POST", "/space.guest.control.v1.Control/Init", "", map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "49983", e2bapi.TokenHeader: tokA}, 404},
		{"dot-dot path", "POST", "/files/../process.Process/Start", "", map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "49983", e2bapi.TokenHeader: tokA}, 404},
		{"escaped slash", "POST", "/process.Process%2FStart", "", map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "49983", e2bapi.TokenHeader: tokA}, 404},
		{"escaped dots", "POST", "/%2e%2e/process.Process/Start", "", map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "49983", e2bapi.TokenHeader: tokA}, 404},
		{"wrong method", "GET", "/process.Process/Start", "", map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "49983", e2bapi.TokenHeader: tokA}, 404},
		{"init", "POST", "/init", "", map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "49983", e2bapi.TokenHeader: tokA}, 404},
		// Another port is SPACE's ServicePort ingress: not exposed, not found.
		{"unexposed port by header", "GET", "/", "", map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "8080", e2bapi.TokenHeader: tokA}, 404},
		{"unexposed port by host", "GET", "/", "8080-" + a.ID + ".localhost", map[string]string{e2bapi.TokenHeader: tokA}, 404},
	}
	for _, tc := range cases {
		got := p.send(tc.method, tc.path, tc.host, "{}", tc.headers)
		if got.status != tc.status || got.header.Get("X-Guest") != "" {
			t.Errorf("%s: HTTP %d %s, want %d from the control plane", tc.name, got.status, got.body, tc.status)
		}
	}

	t.Run("another port of an unknown or deleted sandbox is 502", func(t *testing.T) {
		deleted := p.sandbox(p.tenant, sandbox.StateDeleted, nil)
		for name, h := range map[string]map[string]string{
			"unknown":                {e2bapi.SandboxHeader: sandbox.NewID(), e2bapi.PortHeader: "8000"},
			"deleted":                {e2bapi.SandboxHeader: deleted.ID, e2bapi.PortHeader: "8000"},
			"not a sandbox id":       {e2bapi.SandboxHeader: "NOT-AN-ID", e2bapi.PortHeader: "8000"},
			"deleted, by host":       {"Host": "8000-" + deleted.ID + ".localhost", e2bapi.SandboxHeader: deleted.ID},
			"deleted, traffic token": {e2bapi.SandboxHeader: deleted.ID, e2bapi.PortHeader: "8000", "e2b-traffic-access-token": p.srv.e2bAPI.TrafficToken(deleted.ID)},
		} {
			host := h["Host"]
			delete(h, "Host")
			got := p.send(http.MethodGet, "/", host, "", h)
			var body e2bapi.ProxyError
			_ = json.Unmarshal([]byte(got.body), &body)
			if got.status != http.StatusBadGateway || body.Code != 502 || body.SandboxID != h[e2bapi.SandboxHeader] && name != "not a sandbox id" || body.Message != "The sandbox was not found" {
				t.Errorf("%s: HTTP %d %s, want E2B's 502 The sandbox was not found", name, got.status, got.body)
			}
		}
		// A wrong traffic token is refused before the sandbox is looked up.
		got := p.send(http.MethodGet, "/", "", "", map[string]string{e2bapi.SandboxHeader: deleted.ID, e2bapi.PortHeader: "8000", "e2b-traffic-access-token": strings.Repeat("f", 64)})
		if got.status != http.StatusForbidden {
			t.Errorf("deleted with a wrong traffic token: HTTP %d %s, want 403", got.status, got.body)
		}
	})

	t.Run("unknown, deleted and paused sandboxes are 502", func(t *testing.T) {
		unknown := sandbox.NewID()
		for _, id := range []string{unknown, paused.ID} {
			got := p.envd(http.MethodGet, "/health", id, p.srv.e2bAPI.AccessToken(id))
			var body e2bapi.ProxyError
			_ = json.Unmarshal([]byte(got.body), &body)
			if got.status != http.StatusBadGateway || body.Code != 502 || body.SandboxID != id || body.Message != "The sandbox was not found" {
				t.Errorf("%s: HTTP %d %s, want E2B's 502", id, got.status, got.body)
			}
		}
	})
}

// sign makes envd's URL signature.
func sign(path, op, user, token string, exp int64) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if exp != 0 {
		raw += ":" + strconv.FormatInt(exp, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

func TestE2BSignedFiles(t *testing.T) {
	p := newE2BPlane(t)
	p.sandbox(p.tenant, sandbox.StateRunning, nil)
	a := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	b := p.sandbox(p.otherTenant, sandbox.StateRunning, nil)
	tokA := p.srv.e2bAPI.AccessToken(a.ID)
	future := time.Now().Add(time.Minute).Unix()
	q := func(path, user, sig string, exp int64) string {
		v := url.Values{"path": {path}, "signature": {sig}}
		if user != "" {
			v.Set("username", user)
		}
		if exp != 0 {
			v.Set("signature_expiration", strconv.FormatInt(exp, 10))
		}
		return "/files?" + v.Encode()
	}
	// Without routing headers the signature picks the sandbox.
	got := guestSaw(t, p.send(http.MethodGet, q("/a.txt", "", sign("/a.txt", "read", "", tokA, future), future), "", "", nil))
	if got.Path != "/files" || strings.Contains(got.Query, "signature") || !strings.Contains(got.Query, "path=%2Fa.txt") {
		t.Errorf("guest saw %s?%s, want /files with the path and no signature", got.Path, got.Query)
	}
	if c := p.node.last(); c.Identity != identityOf(a) || c.Ops != capability.OpFiles {
		t.Errorf("capability %+v, want files for %+v", c, identityOf(a))
	}
	guestSaw(t, p.send(http.MethodPost, q("/up.txt", "user", sign("/up.txt", "write", "user", tokA, 0), 0), "", "x", nil))
	// With routing headers, the signature must be the routed sandbox's.
	guestSaw(t, p.send(http.MethodGet, q("/a.txt", "", sign("/a.txt", "read", "", tokA, 0), 0), "", "", map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "49983"}))

	bad := []struct {
		name    string
		method  string
		path    string
		headers map[string]string
	}{
		{"read signature used to write", "POST", q("/a.txt", "", sign("/a.txt", "read", "", tokA, 0), 0), nil},
		{"signature for another path", "GET", q("/b.txt", "", sign("/a.txt", "read", "", tokA, 0), 0), nil},
		{"signature for another user", "GET", q("/a.txt", "root", sign("/a.txt", "read", "user", tokA, 0), 0), nil},
		{"expiry changed", "GET", q("/a.txt", "", sign("/a.txt", "read", "", tokA, future), future+60), nil},
		{"A's signature routed to B", "GET", q("/a.txt", "", sign("/a.txt", "read", "", tokA, 0), 0), map[string]string{e2bapi.SandboxHeader: b.ID, e2bapi.PortHeader: "49983"}},
		{"forged", "GET", q("/a.txt", "", sign("/a.txt", "read", "", "guess", 0), 0), nil},
		{"signature on an RPC", "POST", "/process.Process/Start?signature=" + url.QueryEscape(sign("", "write", "", tokA, 0)), map[string]string{e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "49983"}},
	}
	for _, tc := range bad {
		got := p.send(tc.method, tc.path, "", "", tc.headers)
		if got.status != http.StatusUnauthorized || got.header.Get("X-Guest") != "" || strings.Contains(got.body, "expired") {
			t.Errorf("%s: HTTP %d %s, want 401 (not expired)", tc.name, got.status, got.body)
		}
	}
	// A genuine signature past its expiry gets envd's message, routed by
	// headers or found by its signature alone.
	for name, headers := range map[string]map[string]string{"unrouted": nil, "routed": {e2bapi.SandboxHeader: a.ID, e2bapi.PortHeader: "49983"}} {
		got := p.send(http.MethodGet, q("/a.txt", "", sign("/a.txt", "read", "", tokA, 1000), 1000), "", "", headers)
		if got.status != http.StatusUnauthorized || got.header.Get("X-Guest") != "" || !strings.Contains(got.body, `"message":"signature is already expired"`) {
			t.Errorf("expired, %s: HTTP %d %s, want 401 signature is already expired", name, got.status, got.body)
		}
	}
}

func TestE2BTokens(t *testing.T) {
	mk := func(key byte) *Server {
		sealer, err := NewCASealer(append(make([]byte, 31), key))
		if err != nil {
			t.Fatal(err)
		}
		return New(Config{CASealer: sealer}, nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	s1, s1again, s2 := mk(1), mk(1), mk(2)
	id, other := sandbox.NewID(), sandbox.NewID()
	tok := s1.e2bAPI.AccessToken(id)
	switch {
	case len(tok) != 64:
		t.Errorf("token %q: want 64 hex digits", tok)
	case tok != s1again.e2bAPI.AccessToken(id):
		t.Error("the token changed with a restart on the same sealing key")
	case tok == s2.e2bAPI.AccessToken(id):
		t.Error("two sealing keys give the same token")
	case tok == s1.e2bAPI.AccessToken(other):
		t.Error("two sandboxes have the same token")
	case !s1.e2bAPI.AccessTokenValid(id, tok) || s1.e2bAPI.AccessTokenValid(other, tok) || s2.e2bAPI.AccessTokenValid(id, tok) || s1.e2bAPI.AccessTokenValid(id, ""):
		t.Error("e2bTokenValid accepts a token of another sandbox or server, or refuses the right one")
	}
	if e2bapi.EnvdVersion != guestd.Version {
		t.Errorf("e2bapi.EnvdVersion %s, guest daemon %s: keep them equal", e2bapi.EnvdVersion, guestd.Version)
	}
}

// e2bCall sends an E2B REST request with the given API key in X-API-Key.
func (p *e2bPlane) e2bCall(method, path, key, body string) answer {
	p.t.Helper()
	h := map[string]string{}
	if key != "" {
		h["X-API-Key"] = key
	}
	return p.send(method, E2BPathPrefix+path, "", body, h)
}

// wantE2BError checks an E2B error answer: the status, and the same number
// in the body's code.
func wantE2BError(t *testing.T, what string, a answer, status int) {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(a.body), &e); err != nil || a.status != status || e.Code != status || e.Message == "" {
		t.Errorf("%s: HTTP %d %s, want %d with {code: %d, message}", what, a.status, a.body, status, status)
	}
}

func TestE2BREST(t *testing.T) {
	p := newE2BPlane(t)
	run1 := p.sandbox(p.tenant, sandbox.StateRunning, map[string]string{"team": "a b&c=d"})
	run2 := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	paused := p.sandbox(p.tenant, sandbox.StatePaused, map[string]string{"team": "a b&c=d"})
	failed := p.sandbox(p.tenant, sandbox.StateFailed, nil)
	theirs := p.sandbox(p.otherTenant, sandbox.StateRunning, nil)

	t.Run("auth", func(t *testing.T) {
		wantE2BError(t, "no key", p.e2bCall("GET", "/v2/sandboxes", "", ""), 401)
		wantE2BError(t, "bad key", p.e2bCall("GET", "/v2/sandboxes", "e2b_0123456789abcdef", ""), 401)
		if a := p.send("GET", E2BPathPrefix+"/v2/sandboxes", "", "", map[string]string{"Authorization": "Bearer " + p.key}); a.status != 200 {
			t.Errorf("bearer key: HTTP %d %s", a.status, a.body)
		}
	})
	t.Run("get", func(t *testing.T) {
		a := p.e2bCall("GET", "/sandboxes/"+run1.ID, p.key, "")
		var got map[string]any
		if err := json.Unmarshal([]byte(a.body), &got); err != nil || a.status != 200 {
			t.Fatalf("HTTP %d %s", a.status, a.body)
		}
		for k, want := range map[string]any{
			"sandboxID": run1.ID, "templateID": "minimal", "state": "running", "envdVersion": guestd.Version,
			"envdAccessToken": p.srv.e2bAPI.AccessToken(run1.ID), "cpuCount": 1.0, "memoryMB": 256.0, "clientID": "node-a",
		} {
			if got[k] != want {
				t.Errorf("%s = %v, want %v", k, got[k], want)
			}
		}
		for _, k := range []string{"startedAt", "endAt", "metadata", "diskSizeMB", "domain", "lifecycle"} {
			if _, ok := got[k]; !ok {
				t.Errorf("no %s in %s", k, a.body)
			}
		}
		// E2B has no runtime field: getInfo says it in the metadata.
		if md, _ := got["metadata"].(map[string]any); md[e2bapi.RuntimeKey] != run1.Runtime || run1.Runtime == "" || md["team"] != "a b&c=d" {
			t.Errorf("metadata %v, want %s=%q beside the caller's", got["metadata"], e2bapi.RuntimeKey, run1.Runtime)
		}
		wantE2BError(t, "another tenant's sandbox", p.e2bCall("GET", "/sandboxes/"+theirs.ID, p.key, ""), 404)
		wantE2BError(t, "unknown sandbox", p.e2bCall("GET", "/sandboxes/"+sandbox.NewID(), p.key, ""), 404)
		wantE2BError(t, "failed sandbox", p.e2bCall("GET", "/sandboxes/"+failed.ID, p.key, ""), 404)
		wantE2BError(t, "unknown route", p.e2bCall("GET", "/nope", p.key, ""), 404)
	})
	t.Run("list", func(t *testing.T) {
		ids := func(a answer) []string {
			t.Helper()
			var got []e2bapi.ListedSandbox
			if err := json.Unmarshal([]byte(a.body), &got); err != nil || a.status != 200 {
				t.Fatalf("HTTP %d %s", a.status, a.body)
			}
			var out []string
			for _, sb := range got {
				out = append(out, sb.SandboxID+":"+sb.State)
			}
			return out
		}
		all := ids(p.e2bCall("GET", "/v2/sandboxes", p.key, ""))
		if strings.Join(all, ",") != paused.ID+":paused,"+run2.ID+":running,"+run1.ID+":running" {
			t.Errorf("list = %v, want the tenant's running and paused sandboxes newest first (E2B's default order)", all)
		}
		asc := ids(p.e2bCall("GET", "/v2/sandboxes?order=asc", p.key, ""))
		if strings.Join(asc, ",") != run1.ID+":running,"+run2.ID+":running,"+paused.ID+":paused" {
			t.Errorf("order=asc: %v, want oldest first", asc)
		}
		if got := ids(p.e2bCall("GET", "/v2/sandboxes?state=paused", p.key, "")); len(got) != 1 || got[0] != paused.ID+":paused" {
			t.Errorf("state=paused: %v", got)
		}
		// The SDK escapes keys and values, then URL-encodes the pairs.
		md := url.Values{"team": {url.QueryEscape("a b&c=d")}}.Encode()
		if got := ids(p.e2bCall("GET", "/v2/sandboxes?metadata="+url.QueryEscape(md), p.key, "")); len(got) != 2 {
			t.Errorf("metadata filter: %v, want the two sandboxes with team=a b&c=d", got)
		}
		var pages []string
		path := "/v2/sandboxes?limit=2&order=desc"
		for i := 0; path != "" && i < 5; i++ {
			a := p.e2bCall("GET", path, p.key, "")
			pages = append(pages, strings.Join(ids(a), ","))
			path = ""
			if next := a.header.Get("X-Next-Token"); next != "" {
				path = "/v2/sandboxes?limit=2&order=desc&nextToken=" + url.QueryEscape(next)
			}
		}
		if want := []string{paused.ID + ":paused," + run2.ID + ":running", run1.ID + ":running"}; strings.Join(pages, "|") != strings.Join(want, "|") {
			t.Errorf("pages %v, want %v", pages, want)
		}
		if got := ids(p.e2bCall("GET", "/sandboxes", p.key, "")); len(got) != 2 {
			t.Errorf("GET /sandboxes (running only): %v", got)
		}
		for _, q := range []string{"limit=0", "limit=101", "state=dead", "nextToken=x", "order=up", "startedAfter=yesterday"} {
			wantE2BError(t, q, p.e2bCall("GET", "/v2/sandboxes?"+q, p.key, ""), 400)
		}
	})
	t.Run("refused before any work", func(t *testing.T) {
		for body, why := range map[string]string{
			`{"templateID":"minimal","timeout":300,"network":{"denyOut":["evil.com"]}}`:      "a domain in denyOut",
			`{"templateID":"minimal","network":{"allowPublicTraffic":false},"secure":false}`: "private ports without secure",
			`{"templateID":"minimal","network":{"maskRequestHost":"localhost:${PORT}"}}`:     "maskRequestHost",
			`{"templateID":"minimal","network":{"allowPublicTraffic":"no"}}`:                 "allowPublicTraffic not a bool",
			`{"templateID":"minimal","network":[]}`:                                          "network not an object",
			`{"templateID":"minimal","timeout":0}`:                                           "zero timeout",
			`{"timeout":300}`:                                                                "no template",
			`{"templateID":"minimal","volumeMounts":[{"name":"v","path":"/v"}]}`:             "volumes",
			`{"templateID":`: "malformed",
		} {
			wantE2BError(t, why, p.e2bCall("POST", "/v2/sandboxes", p.key, body), 400)
		}
		for body, why := range map[string]string{ // lifecycles E2B refuses too
			`{"templateID":"minimal","timeout":300,"autoResume":{"enabled":true}}`:                            "autoResume without autoPause",
			`{"templateID":"minimal","autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}}`: "autoResume without memory",
		} {
			wantE2BError(t, why, p.e2bCall("POST", "/v2/sandboxes", p.key, body), 400)
		}
		wantE2BError(t, "pause a paused sandbox", p.e2bCall("POST", "/sandboxes/"+paused.ID+"/pause", p.key, ""), 409)
		wantE2BError(t, "pause another tenant's", p.e2bCall("POST", "/sandboxes/"+theirs.ID+"/pause", p.key, ""), 404)
		wantE2BError(t, "resume a running sandbox", p.e2bCall("POST", "/sandboxes/"+run1.ID+"/resume", p.key, `{"timeout":10}`), 409)
		wantE2BError(t, "connect a failed sandbox", p.e2bCall("POST", "/v2/sandboxes/"+failed.ID+"/connect", p.key, `{"timeout":10}`), 404)
		wantE2BError(t, "delete a template", p.e2bCall("DELETE", "/templates/minimal", p.key, ""), 404)
		wantE2BError(t, "another tenant's snapshot", p.e2bCall("DELETE", "/templates/sn-aaaaaaaaaaaaaaaa", p.key, ""), 404)
		wantE2BError(t, "fork count", p.e2bCall("POST", "/sandboxes/"+run1.ID+"/fork", p.key, `{"count":101}`), 400)
		wantE2BError(t, "create from an unknown snapshot", p.e2bCall("POST", "/v2/sandboxes", p.key, `{"templateID":"sn-aaaaaaaaaaaaaaaa","timeout":30}`), 404)
	})
	t.Run("metrics: one sample measured on the node now", func(t *testing.T) {
		a := p.e2bCall("GET", "/sandboxes/"+run1.ID+"/metrics", p.key, "")
		var got []e2bapi.Metric
		if a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &got) != nil || len(got) != 1 {
			t.Fatalf("metrics: HTTP %d %s, want one sample", a.status, a.body)
		}
		m := got[0]
		if m.CPUCount != 1 || m.MemUsed != 100<<20 || m.MemTotal != 256<<20 || m.CPUUsedPct < 35 || m.CPUUsedPct > 65 || m.TimestampUnix == 0 {
			t.Errorf("metrics sample %+v, want 1 CPU at ~50%%, 100 of 256 MiB", m)
		}
		if m.DiskUsed == nil || *m.DiskUsed != 10<<20 || m.DiskTotal == nil || *m.DiskTotal != 2048<<20 {
			t.Errorf("metrics sample disk %v of %v, want 10 MiB of 2048 MiB as the node measured", m.DiskUsed, m.DiskTotal)
		}
		for _, k := range []string{"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memTotal", "diskUsed", "diskTotal"} {
			if !strings.Contains(a.body, `"`+k+`"`) {
				t.Errorf("metrics body lacks %s: %s", k, a.body)
			}
		}
		for name, path := range map[string]string{
			"a paused sandbox":    "/sandboxes/" + paused.ID + "/metrics",
			"a window that ended": "/sandboxes/" + run1.ID + "/metrics?end=1000",
		} {
			if a := p.e2bCall("GET", path, p.key, ""); a.status != http.StatusOK || strings.TrimSpace(a.body) != "[]" {
				t.Errorf("metrics of %s: HTTP %d %s, want an empty series", name, a.status, a.body)
			}
		}
		wantE2BError(t, "metrics of another tenant's sandbox", p.e2bCall("GET", "/sandboxes/"+theirs.ID+"/metrics", p.key, ""), 404)
		wantE2BError(t, "metrics with a bad end", p.e2bCall("GET", "/sandboxes/"+run1.ID+"/metrics?end=soon", p.key, ""), 400)
	})
	t.Run("metrics on the native API: the same samples, disk included", func(t *testing.T) {
		auth := map[string]string{"Authorization": "Bearer " + p.key}
		a := p.send(http.MethodGet, "/v1/sandboxes/"+run1.ID+"/metrics", "", "", auth)
		var got sandboxv1.MetricList
		if a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &got) != nil || len(got.Metrics) != 1 {
			t.Fatalf("GET /v1/…/metrics: HTTP %d %s, want one sample", a.status, a.body)
		}
		m := got.Metrics[0]
		if m.CPUCount != 1 || m.MemUsedBytes != 100<<20 || m.MemTotalBytes != 256<<20 || m.CPUUsedPct < 35 || m.CPUUsedPct > 65 || m.Time.IsZero() {
			t.Errorf("sample %+v, want 1 CPU at ~50%%, 100 of 256 MiB", m)
		}
		if m.DiskUsedBytes == nil || *m.DiskUsedBytes != 10<<20 || m.DiskTotalBytes == nil || *m.DiskTotalBytes != 2048<<20 {
			t.Errorf("sample disk %v of %v, want 10 MiB of 2048 MiB as the node measured", m.DiskUsedBytes, m.DiskTotalBytes)
		}
		if m.SpanSeconds < 0.2 || m.SpanSeconds > 5 {
			t.Errorf("span_seconds %v, want the quarter second measured", m.SpanSeconds)
		}
		if a := p.send(http.MethodGet, "/v1/sandboxes/"+run1.ID+"/metrics?end=1000", "", "", auth); a.status != http.StatusOK || strings.TrimSpace(a.body) != `{"metrics":[]}` {
			t.Errorf("a window that ended: HTTP %d %s, want no samples", a.status, a.body)
		}
		for name, c := range map[string]struct {
			path string
			want int
		}{
			"another tenant's sandbox": {"/v1/sandboxes/" + theirs.ID + "/metrics", 404},
			"a bad end":                {"/v1/sandboxes/" + run1.ID + "/metrics?end=soon", 400},
			"end before start":         {"/v1/sandboxes/" + run1.ID + "/metrics?start=20&end=10", 400},
		} {
			if a := p.send(http.MethodGet, c.path, "", "", auth); a.status != c.want {
				t.Errorf("%s: HTTP %d %s, want %d", name, a.status, a.body, c.want)
			}
		}
	})
	t.Run("connect a running sandbox", func(t *testing.T) {
		a := p.e2bCall("POST", "/v2/sandboxes/"+run2.ID+"/connect", p.key, `{"timeout":10}`)
		var got e2bapi.Sandbox
		if err := json.Unmarshal([]byte(a.body), &got); err != nil || a.status != 200 || got.SandboxID != run2.ID || got.EnvdAccessToken != p.srv.e2bAPI.AccessToken(run2.ID) || got.EnvdVersion != guestd.Version {
			t.Errorf("HTTP %d %s, want 200 with the sandbox and its token", a.status, a.body)
		}
		a = p.e2bCall("GET", "/snapshots", p.key, "")
		if a.status != 200 || strings.TrimSpace(a.body) != "[]" {
			t.Errorf("snapshots: HTTP %d %s, want []", a.status, a.body)
		}
	})
}

// TestRestoreNodeNeedsAdmin: choosing the node of a restore is an operator's
// decision; a tenant key is refused before anything changes.
func TestRestoreNodeNeedsAdmin(t *testing.T) {
	p := newE2BPlane(t)
	sb := p.sandbox(p.tenant, sandbox.StateHibernated, nil)
	got := p.send(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/restore", "", `{"node":"node-a"}`, map[string]string{"Authorization": "Bearer " + p.key})
	if got.status != http.StatusForbidden {
		t.Errorf("tenant restore with a node: HTTP %d %s, want 403", got.status, got.body)
	}
	got = p.send(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/restore", "", `{"node":"Bad Node!"}`, map[string]string{"Authorization": "Bearer " + p.key})
	if got.status != http.StatusForbidden && got.status != http.StatusBadRequest {
		t.Errorf("tenant restore with a malformed node: HTTP %d %s", got.status, got.body)
	}
	got = p.send(http.MethodPost, "/v1/sandboxes/"+sb.ID+"/restore", "", `{"node":1}`, map[string]string{"Authorization": "Bearer " + p.key})
	if got.status != http.StatusBadRequest {
		t.Errorf("restore with a malformed body: HTTP %d %s, want 400", got.status, got.body)
	}
	cur, err := p.st.GetSandboxByID(context.Background(), sb.ID)
	if err != nil || cur.State != sandbox.StateHibernated {
		t.Errorf("after refused restores: %+v %v, want still hibernated", cur, err)
	}
}

// TestE2BCursorOfAnotherTenant: over the real E2B REST API, a nextToken
// tenant A was given pages A's listing and is refused with 400 for tenant
// B, for A's snapshot listing, and when edited.
func TestE2BCursorOfAnotherTenant(t *testing.T) {
	p := newE2BPlane(t)
	for range 3 {
		p.sandbox(p.tenant, sandbox.StateRunning, nil)
	}
	p.sandbox(p.otherTenant, sandbox.StateRunning, nil)
	first := p.e2bCall(http.MethodGet, "/v2/sandboxes?limit=2", p.key, "")
	next := first.header.Get("X-Next-Token")
	if first.status != http.StatusOK || next == "" {
		t.Fatalf("first page: HTTP %d, X-Next-Token %q", first.status, next)
	}
	q := "/v2/sandboxes?limit=2&nextToken=" + url.QueryEscape(next)
	if a := p.e2bCall(http.MethodGet, q, p.key, ""); a.status != http.StatusOK || strings.Count(a.body, `"sandboxID"`) != 1 {
		t.Errorf("A's second page with A's token: HTTP %d %s, want the one sandbox left", a.status, a.body)
	}
	wantE2BError(t, "B with A's token", p.e2bCall(http.MethodGet, q, p.other, ""), http.StatusBadRequest)
	wantE2BError(t, "A's token on the snapshot listing", p.e2bCall(http.MethodGet, "/snapshots?nextToken="+url.QueryEscape(next), p.key, ""), http.StatusBadRequest)
	edited := []byte(next)
	edited[len(edited)/2] ^= 2
	wantE2BError(t, "an edited token", p.e2bCall(http.MethodGet, "/v2/sandboxes?nextToken="+url.QueryEscape(string(edited)), p.key, ""), http.StatusBadRequest)
}

// TestE2BShapedKey: POST /v1/keys {"e2b": true} mints a key in E2B's shape
// that authenticates as its tenant on the E2B API (X-API-Key) and SPACE's;
// a change of one secret digit, and the key once revoked, are refused.
func TestE2BShapedKey(t *testing.T) {
	p := newE2BPlane(t)
	mine := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	a := p.send("POST", "/v1/keys", "", `{"e2b":true}`, map[string]string{"Authorization": "Bearer " + p.key})
	var created sandboxv1.CreateKeyResponse
	if err := json.Unmarshal([]byte(a.body), &created); err != nil || a.status != http.StatusCreated {
		t.Fatalf("POST /v1/keys e2b: HTTP %d %s", a.status, a.body)
	}
	key := created.Secret
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(key) || created.Key.Tenant != p.tenant || created.Key.Prefix != "e2b_"+key[4:12]+"…" {
		t.Fatalf("minted %q (%+v), want e2b_ and 40 hex of tenant %s", key, created.Key, p.tenant)
	}
	if a := p.e2bCall("GET", "/sandboxes/"+mine.ID, key, ""); a.status != http.StatusOK {
		t.Errorf("E2B API with the e2b key: HTTP %d %s", a.status, a.body)
	}
	if a := p.send("GET", "/v1/sandboxes/"+mine.ID, "", "", map[string]string{"Authorization": "Bearer " + key}); a.status != http.StatusOK {
		t.Errorf("SPACE API with the e2b key: HTTP %d %s", a.status, a.body)
	}
	last := key[len(key)-1]
	forged := key[:len(key)-1] + string("0123456789abcdef"[(strings.IndexByte("0123456789abcdef", last)+1)%16])
	wantE2BError(t, "one secret digit changed", p.e2bCall("GET", "/sandboxes/"+mine.ID, forged, ""), http.StatusUnauthorized)
	if a := p.send("DELETE", "/v1/keys/"+url.PathEscape(created.Key.Prefix), "", "", map[string]string{"Authorization": "Bearer " + p.key}); a.status != http.StatusNoContent {
		t.Fatalf("revoke %s: HTTP %d %s", created.Key.Prefix, a.status, a.body)
	}
	wantE2BError(t, "revoked e2b key", p.e2bCall("GET", "/sandboxes/"+mine.ID, key, ""), http.StatusUnauthorized)
}
