package server

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/nodeclient"
	"github.com/spacesandbox/space/internal/restapi"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// portNode is a node-api serving the ServicePort routes the way a node does:
// it verifies the node token and the capability (signature, operation,
// port, protocol) and compares the capability's identity with the
// execution it installed, answering RefreshRoute to another incarnation.
// The "guest" behind it echoes what it received.
type portNode struct {
	t    *testing.T
	keys *capability.KeySet

	mu        sync.Mutex                     // guards installed and seen
	installed map[string]capability.Identity // exec id -> identity
	seen      []*capability.Capability
	// onRefresh, when set, runs before a RefreshRoute answer (the test
	// moves the sandbox to the installed execution there).
	onRefresh func()
	calls     atomic.Int64
}

// echo is what the fake guest answers to HTTP.
type echo struct {
	Method, Path, Query, Host, Body string
	Header                          http.Header
}

func (n *portNode) install(execID string, id capability.Identity) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.installed[execID] = id
}

func (n *portNode) lastCapability() *capability.Capability {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.seen) == 0 {
		return nil
	}
	return n.seen[len(n.seen)-1]
}

// check verifies the request's credentials for port and protocol; it
// answers and returns false when they do not hold.
func (n *portNode) check(w http.ResponseWriter, r *http.Request, protocol string) bool {
	n.calls.Add(1)
	if r.Header.Get(nodeclient.TokenHeader) != "node-token" {
		writeJSON(w, http.StatusUnauthorized, sandboxv1.Error{Code: sandboxv1.CodeUnauthenticated, Message: "bad node token"})
		return false
	}
	port, err := service.ParsePort(r.PathValue("port"))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, sandboxv1.Error{Code: sandboxv1.CodeInvalidArgument, Message: err.Error()})
		return false
	}
	tok, err := capability.Decode(r.Header.Get(capability.Header))
	var c *capability.Capability
	if err == nil {
		c, err = capability.Verify(tok, n.keys, time.Now())
	}
	if err != nil {
		writeJSON(w, http.StatusForbidden, sandboxv1.Error{Code: sandboxv1.CodePermissionDenied, Message: err.Error()})
		return false
	}
	n.mu.Lock()
	n.seen = append(n.seen, c)
	installed, ok := n.installed[r.PathValue("exec")]
	onRefresh := n.onRefresh
	n.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusNotFound, sandboxv1.Error{Code: sandboxv1.CodeNotFound, Message: "no such execution"})
		return false
	}
	switch d, why := capability.Compare(c, installed, capability.Request{Op: capability.OpServicePort, Port: uint16(port), Protocol: protocol}); d {
	case capability.Allow:
		return true
	case capability.RefreshRoute:
		if onRefresh != nil {
			onRefresh()
		}
		writeJSON(w, http.StatusConflict, sandboxv1.Error{Code: "refresh_route", Message: why})
	default:
		writeJSON(w, http.StatusForbidden, sandboxv1.Error{Code: sandboxv1.CodePermissionDenied, Message: why})
	}
	return false
}

func (n *portNode) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/node/v1/executions/{exec}/ports/{port}/{rest...}", func(w http.ResponseWriter, r *http.Request) {
		if !n.check(w, r, "http") {
			return
		}
		r.Header.Del(capability.Header) // as the node does
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			n.upgradeEcho(w, r, "websocket", nil)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		w.Header().Set("X-Guest", "yes")
		writeJSON(w, http.StatusOK, echo{Method: r.Method, Path: "/" + r.PathValue("rest"), Query: r.URL.RawQuery, Host: r.Host, Body: string(body), Header: r.Header})
	})
	mux.HandleFunc("GET /node/v1/executions/{exec}/tcp/{port}", func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), nodeclient.TCPUpgrade) {
			writeJSON(w, http.StatusBadRequest, sandboxv1.Error{Code: sandboxv1.CodeInvalidArgument, Message: "no upgrade"})
			return
		}
		if !n.check(w, r, "tcp") {
			return
		}
		// The guest service: echoes, and says "eof" after the client's
		// half-close.
		n.upgradeEcho(w, r, nodeclient.TCPUpgrade, []byte("|eof"))
	})
	return mux
}

// upgradeEcho answers 101 with proto, then echoes bytes until the client
// half-closes, then writes trailer and closes.
func (n *portNode) upgradeEcho(w http.ResponseWriter, r *http.Request, proto string, trailer []byte) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		n.t.Errorf("hijack: %v", err)
		return
	}
	defer conn.Close()
	fmt.Fprintf(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", proto)
	_ = conn.SetDeadline(time.Now().Add(time.Minute)) // deadlock guard
	_, _ = io.Copy(conn, brw.Reader)
	_, _ = conn.Write(trailer)
}

// testSigner returns a fresh signing key and its verification bundle.
func testSigner(t *testing.T) (*capability.Signer, *capability.KeySet) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := capability.NewSigner("k1", priv)
	if err != nil {
		t.Fatal(err)
	}
	return signer, capability.KeySetFor(1, signer)
}

// portPlane is a control plane without a reconciler over a real SQLite
// store, one fake node and two tenants, with sandboxes written straight
// into the store.
type portPlane struct {
	t          *testing.T
	st         *sqlite.Store
	srv        *Server
	url        string
	addr       string // host:port of the API
	node       *portNode
	tenant     string
	key, other string
}

func newPortPlane(t *testing.T) *portPlane {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	signer, keys := testSigner(t)
	p := &portPlane{t: t, st: st, node: &portNode{t: t, keys: keys, installed: map[string]capability.Identity{}}}
	var apiKeys [2]string
	for i, name := range []string{"acme", "other"} {
		tn := store.Tenant{ID: sandbox.NewTenantID(), Name: name, CreatedAt: time.Now().UTC()}
		if err := st.CreateTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			p.tenant = tn.ID
		}
		if _, apiKeys[i], err = service.MintKey(ctx, st, tn.ID, false); err != nil {
			t.Fatal(err)
		}
	}
	p.key, p.other = apiKeys[0], apiKeys[1]
	nodeSrv := httptest.NewServer(p.node.handler())
	t.Cleanup(nodeSrv.Close)
	nodes := NewNodes()
	if err := nodes.Register("node-a", strings.TrimPrefix(nodeSrv.URL, "http://"), "node-token"); err != nil {
		t.Fatal(err)
	}
	p.srv = New(Config{Signer: signer, Keys: keys}, st, nodes, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	api := httptest.NewServer(p.srv.Handler())
	t.Cleanup(api.Close)
	p.url, p.addr = api.URL, strings.TrimPrefix(api.URL, "http://")
	return p
}

// sandbox records a sandbox of the first tenant in state, running as
// generation 8 on node-a, installed on the fake node.
func (p *portPlane) sandbox(state sandbox.State) *sandbox.Sandbox {
	p.t.Helper()
	sb := sandbox.New(p.tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, time.Now())
	sb.State, sb.Node, sb.Generation, sb.ActivationID = state, "node-a", 8, sandbox.NewActivationID()
	sb.ExecID = sandbox.NewExecID(sb.ID, 8)
	if err := p.st.CreateSandbox(p.t.Context(), sb); err != nil {
		p.t.Fatal(err)
	}
	p.node.install(sb.ExecID, identityOf(sb))
	return sb
}

// expose exposes a port through the API and returns the answer.
func (p *portPlane) expose(id string, port int, protocol string, public bool) sandboxv1.ServicePort {
	p.t.Helper()
	body, _ := json.Marshal(sandboxv1.ExposePortRequest{Port: port, Protocol: protocol, Public: public})
	resp := p.send(http.MethodPost, p.url+"/v1/sandboxes/"+id+"/ports", "", string(body), map[string]string{"Authorization": "Bearer " + p.key})
	if resp.status != http.StatusCreated {
		p.t.Fatalf("expose %d: HTTP %d %s", port, resp.status, resp.body)
	}
	var sp sandboxv1.ServicePort
	if err := json.Unmarshal([]byte(resp.body), &sp); err != nil {
		p.t.Fatal(err)
	}
	return sp
}

type answer struct {
	status int
	body   string
	header http.Header
}

// send sends a request to url with Host host (when not empty) and headers.
func (p *portPlane) send(method, url, host, body string, headers map[string]string) answer {
	p.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
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

// guestSaw decodes the fake guest's echo.
func guestSaw(t *testing.T, a answer) echo {
	t.Helper()
	if a.status != http.StatusOK || a.header.Get("X-Guest") != "yes" {
		t.Fatalf("answer HTTP %d %s, want the guest's 200", a.status, a.body)
	}
	var e echo
	if err := json.Unmarshal([]byte(a.body), &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// wantError checks an API error answer.
func wantError(t *testing.T, what string, a answer, status int, code string) {
	t.Helper()
	var e sandboxv1.Error
	_ = json.Unmarshal([]byte(a.body), &e)
	if a.status != status || e.Code != code || a.header.Get("X-Guest") != "" {
		t.Errorf("%s: HTTP %d %s, want %d %s from the control plane", what, a.status, a.body, status, code)
	}
}

// wantCapability checks the capability the node last received.
func (p *portPlane) wantCapability(sb *sandbox.Sandbox, port uint16, protocol string) {
	p.t.Helper()
	c := p.node.lastCapability()
	if c == nil {
		p.t.Fatal("the node received no capability")
	}
	if c.Identity != identityOf(sb) || c.Ops != capability.OpServicePort || c.Port != port || c.Protocol != protocol {
		p.t.Errorf("capability %+v, want identity %+v, op ServicePort only, port %d, protocol %s", c, identityOf(sb), port, protocol)
	}
}

func TestIngressHTTP(t *testing.T) {
	p := newPortPlane(t)
	sb := p.sandbox(sandbox.StateRunning)
	pub := p.expose(sb.ID, 8080, "", true)
	priv := p.expose(sb.ID, 3000, "http", false)
	tcp := p.expose(sb.ID, 2222, "tcp", false)
	_, apiPort, _ := net.SplitHostPort(p.addr)
	if want := fmt.Sprintf("http://8080-%s.localhost:%s/", sb.ID, apiPort); pub.URL != want || pub.Protocol != "http" || !pub.Public || pub.Token != "" {
		t.Errorf("public expose = %+v, want URL %s, no token", pub, want)
	}
	if want := p.url + "/v1/sandboxes/" + sb.ID + "/ports/3000/proxy/"; priv.ProxyURL != want || !strings.HasPrefix(priv.Token, service.PortTokenPrefix) || priv.Public {
		t.Errorf("private expose = %+v, want proxy URL %s and a token", priv, want)
	}
	hostOf := func(port int) string { return fmt.Sprintf("%d-%s.localhost:%s", port, sb.ID, apiPort) }
	auth := map[string]string{"Authorization": "Bearer " + p.key}

	t.Run("host routing, public", func(t *testing.T) {
		e := guestSaw(t, p.send(http.MethodPost, p.url+"/api/items?x=1&y=%20", hostOf(8080), "hello", map[string]string{
			"Authorization": "Bearer app-token", "X-App": "kept", capability.Header: "forged",
			"Sec-WebSocket-Protocol": "chat.v1, " + restapi.WSBearerPrefix + p.key + ", graphql-ws"}))
		if e.Method != "POST" || e.Path != "/api/items" || e.Query != "x=1&y=%20" || e.Body != "hello" || e.Host != hostOf(8080) {
			t.Errorf("guest saw %+v", e)
		}
		if e.Header.Get("Authorization") != "Bearer app-token" || e.Header.Get("X-App") != "kept" || e.Header.Get("X-Forwarded-Host") != hostOf(8080) {
			t.Errorf("guest headers %v: the application's Authorization and headers pass, X-Forwarded-Host is set", e.Header)
		}
		if got := e.Header.Values("Sec-WebSocket-Protocol"); len(got) != 1 || got[0] != "chat.v1, graphql-ws" {
			t.Errorf("guest saw subprotocols %q, want the application's (chat.v1, graphql-ws) and never the %s key", got, restapi.WSBearerPrefix)
		}
		p.wantCapability(sb, 8080, "http")
		// Host names are case-insensitive and may end with a dot.
		guestSaw(t, p.send(http.MethodGet, p.url+"/", strings.ToUpper(fmt.Sprintf("8080-%s.LOCALHOST.:%s", sb.ID, apiPort)), "", nil))
	})

	t.Run("path routing", func(t *testing.T) {
		e := guestSaw(t, p.send(http.MethodGet, p.url+"/v1/sandboxes/"+sb.ID+"/ports/8080/proxy/a/b%2Fc?q=1", "", "", nil))
		if e.Path != "/a/b/c" || e.Query != "q=1" {
			t.Errorf("guest saw %+v", e)
		}
		if e := guestSaw(t, p.send(http.MethodGet, p.url+"/v1/sandboxes/"+sb.ID+"/ports/8080/proxy/", "", "", nil)); e.Path != "/" {
			t.Errorf("root: guest saw path %q", e.Path)
		}
	})

	t.Run("header routing", func(t *testing.T) {
		e := guestSaw(t, p.send(http.MethodGet, p.url+"/h/x?q=2", "", "", map[string]string{
			sandboxv1.SandboxHeader: sb.ID, sandboxv1.PortHeader: "3000", sandboxv1.PortTokenHeader: priv.Token}))
		if e.Path != "/h/x" || e.Query != "q=2" || e.Header.Get(sandboxv1.SandboxHeader) != "" || e.Header.Get(sandboxv1.PortHeader) != "" {
			t.Errorf("guest saw %+v; want the path as sent and no routing headers", e)
		}
		p.wantCapability(sb, 3000, "http")
		wantError(t, "only one routing header", p.send(http.MethodGet, p.url+"/", "", "", map[string]string{sandboxv1.SandboxHeader: sb.ID}), 400, sandboxv1.CodeInvalidArgument)
		wantError(t, "no credentials", p.send(http.MethodGet, p.url+"/", "", "", map[string]string{sandboxv1.SandboxHeader: sb.ID, sandboxv1.PortHeader: "3000"}), 401, sandboxv1.CodeUnauthenticated)
		wantError(t, "bad sandbox id", p.send(http.MethodGet, p.url+"/", "", "", map[string]string{sandboxv1.SandboxHeader: "../x", sandboxv1.PortHeader: "8080"}), 404, sandboxv1.CodeNotFound)
	})

	t.Run("private port credentials", func(t *testing.T) {
		wantError(t, "no credentials", p.send(http.MethodGet, p.url+"/", hostOf(3000), "", nil), 401, sandboxv1.CodeUnauthenticated)
		wantError(t, "an application's bearer token", p.send(http.MethodGet, p.url+"/", hostOf(3000), "", map[string]string{"Authorization": "Bearer app"}), 401, sandboxv1.CodeUnauthenticated)
		wantError(t, "wrong token", p.send(http.MethodGet, p.url+"/", hostOf(3000), "", map[string]string{sandboxv1.PortTokenHeader: "spt_wrong"}), 401, sandboxv1.CodeUnauthenticated)
		wantError(t, "wrong token in the query", p.send(http.MethodGet, p.url+"/?space_port_token=spt_wrong", hostOf(3000), "", nil), 401, sandboxv1.CodeUnauthenticated)
		wantError(t, "another tenant's key", p.send(http.MethodGet, p.url+"/", hostOf(3000), "", map[string]string{"Authorization": "Bearer " + p.other}), 404, sandboxv1.CodeNotFound)
		wantError(t, "a bad API key", p.send(http.MethodGet, p.url+"/", hostOf(3000), "", map[string]string{"Authorization": "Bearer " + p.key[:len(p.key)-2] + "00"}), 401, sandboxv1.CodeUnauthenticated)
		// A token for another port is a wrong token.
		other := p.expose(sb.ID, 3001, "http", false)
		wantError(t, "another port's token", p.send(http.MethodGet, p.url+"/", hostOf(3000), "", map[string]string{sandboxv1.PortTokenHeader: other.Token}), 401, sandboxv1.CodeUnauthenticated)

		e := guestSaw(t, p.send(http.MethodGet, p.url+"/k", hostOf(3000), "", auth))
		if e.Header.Get("Authorization") != "" {
			t.Errorf("the guest saw the API key: %v", e.Header)
		}
		e = guestSaw(t, p.send(http.MethodGet, p.url+"/t", hostOf(3000), "", map[string]string{sandboxv1.PortTokenHeader: priv.Token, "Authorization": "Basic YTpi"}))
		if e.Header.Get(sandboxv1.PortTokenHeader) != "" || e.Header.Get("Authorization") != "Basic YTpi" || e.Header.Get(capability.Header) != "" {
			t.Errorf("token header: guest headers %v; want the token stripped and the application's Authorization kept", e.Header)
		}
		e = guestSaw(t, p.send(http.MethodGet, p.url+"/v1/sandboxes/"+sb.ID+"/ports/3000/proxy/q?a=1&space_port_token="+priv.Token+"&b=2", "", "", nil))
		if e.Query != "a=1&b=2" || e.Path != "/q" {
			t.Errorf("token query: guest saw %+v; want the token removed from the query", e)
		}
		if strings.Contains(fmt.Sprint(e.Header), priv.Token) {
			t.Errorf("the guest saw the token in %v", e.Header)
		}
		p.wantCapability(sb, 3000, "http")

		// Exposing again replaces the token.
		again := p.expose(sb.ID, 3000, "http", false)
		wantError(t, "the replaced token", p.send(http.MethodGet, p.url+"/", hostOf(3000), "", map[string]string{sandboxv1.PortTokenHeader: priv.Token}), 401, sandboxv1.CodeUnauthenticated)
		guestSaw(t, p.send(http.MethodGet, p.url+"/", hostOf(3000), "", map[string]string{sandboxv1.PortTokenHeader: again.Token}))
	})

	t.Run("refusals", func(t *testing.T) {
		calls := p.node.calls.Load()
		wantError(t, "unexposed port", p.send(http.MethodGet, p.url+"/", hostOf(9999), "", auth), 404, sandboxv1.CodeNotFound)
		wantError(t, "unexposed port, path form", p.send(http.MethodGet, p.url+"/v1/sandboxes/"+sb.ID+"/ports/9999/proxy/", "", "", auth), 404, sandboxv1.CodeNotFound)
		wantError(t, "unknown sandbox", p.send(http.MethodGet, p.url+"/", fmt.Sprintf("8080-%s.localhost", strings.Repeat("z", 20)), "", nil), 404, sandboxv1.CodeNotFound)
		wantError(t, "impossible sandbox id", p.send(http.MethodGet, p.url+"/", "8080-x.localhost", "", nil), 404, sandboxv1.CodeNotFound)
		wantError(t, "port 0", p.send(http.MethodGet, p.url+"/", "0-"+sb.ID+".localhost", "", nil), 404, sandboxv1.CodeNotFound)
		wantError(t, "tcp port over HTTP", p.send(http.MethodGet, p.url+"/", hostOf(2222), "", map[string]string{sandboxv1.PortTokenHeader: tcp.Token}), 400, sandboxv1.CodeInvalidArgument)
		wantError(t, "bad port in the path", p.send(http.MethodGet, p.url+"/v1/sandboxes/"+sb.ID+"/ports/99999/proxy/", "", "", auth), 400, sandboxv1.CodeInvalidArgument)
		if n := p.node.calls.Load() - calls; n != 0 {
			t.Errorf("the node saw %d refused requests", n)
		}
		// The API itself still answers on its own host name.
		if a := p.send(http.MethodGet, p.url+"/healthz", "", "", nil); a.status != 200 {
			t.Errorf("healthz: HTTP %d", a.status)
		}
	})

	t.Run("stopped sandbox", func(t *testing.T) {
		stopped := p.sandbox(sandbox.StateStopped)
		p.expose(stopped.ID, 8080, "http", true)
		a := p.send(http.MethodGet, p.url+"/", fmt.Sprintf("8080-%s.localhost", stopped.ID), "", nil)
		wantError(t, "stopped sandbox", a, 409, sandboxv1.CodeConflict)
		if !strings.Contains(a.body, "stopped") {
			t.Errorf("409 %s does not name the state", a.body)
		}
	})

	t.Run("websocket upgrade passes through", func(t *testing.T) {
		conn, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", hostOf(8080))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") {
			t.Fatalf("upgrade answer HTTP %d %v", resp.StatusCode, resp.Header)
		}
		if _, err := conn.Write([]byte("frame-bytes")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len("frame-bytes"))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "frame-bytes" {
			t.Errorf("echo %q, %v", buf, err)
		}
	})
}

// TestIngressTCP: a tcp port is reached through the space-tcp upgrade with
// a "tcp" capability; bytes flow both ways and a half-close passes through.
func TestIngressTCP(t *testing.T) {
	p := newPortPlane(t)
	sb := p.sandbox(sandbox.StateRunning)
	sp := p.expose(sb.ID, 2222, "tcp", false)
	httpPort := p.expose(sb.ID, 8080, "http", true)
	if want := p.url + "/v1/sandboxes/" + sb.ID + "/ports/2222/tcp"; sp.URL != want || sp.ProxyURL != "" {
		t.Errorf("tcp expose = %+v, want URL %s", sp, want)
	}
	_ = httpPort

	tunnel := func(path string, headers string) (net.Conn, *bufio.Reader, *http.Response) {
		t.Helper()
		conn, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		// "early" is sent with the request head: it belongs to the tunnel.
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n%sConnection: Upgrade\r\nUpgrade: space-tcp\r\n\r\nearly", path, p.addr, headers)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return conn, br, resp
	}
	conn, br, resp := tunnel("/v1/sandboxes/"+sb.ID+"/ports/2222/tcp", sandboxv1.PortTokenHeader+": "+sp.Token+"\r\n")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("tunnel: HTTP %d %s", resp.StatusCode, b)
	}
	if _, err := conn.Write([]byte("+ping")); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "early+ping|eof" {
		t.Errorf("through the tunnel: %q, %v; want \"early+ping|eof\" (echo, then the guest's answer to the half-close)", got, err)
	}
	p.wantCapability(sb, 2222, "tcp")

	for _, tc := range []struct {
		name, path, headers string
		status              int
	}{
		{"no credentials", "/v1/sandboxes/" + sb.ID + "/ports/2222/tcp", "", 401},
		{"wrong token", "/v1/sandboxes/" + sb.ID + "/ports/2222/tcp", sandboxv1.PortTokenHeader + ": spt_x\r\n", 401},
		{"http port", "/v1/sandboxes/" + sb.ID + "/ports/8080/tcp", "", 400},
		{"unexposed", "/v1/sandboxes/" + sb.ID + "/ports/2223/tcp", "Authorization: Bearer " + p.key + "\r\n", 404},
	} {
		_, _, resp := tunnel(tc.path, tc.headers)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: HTTP %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
	}
	// The API key works too.
	conn, br, resp = tunnel("/v1/sandboxes/"+sb.ID+"/ports/2222/tcp", "Authorization: Bearer "+p.key+"\r\n")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("tunnel with the API key: HTTP %d", resp.StatusCode)
	}
	conn.(*net.TCPConn).CloseWrite()
	if got, _ := io.ReadAll(br); string(got) != "early|eof" {
		t.Errorf("through the tunnel: %q", got)
	}
	// Without the upgrade header it is a bad request.
	a := p.send(http.MethodGet, p.url+"/v1/sandboxes/"+sb.ID+"/ports/2222/tcp", "", "", map[string]string{"Authorization": "Bearer " + p.key})
	wantError(t, "no upgrade", a, 400, sandboxv1.CodeInvalidArgument)
}

// TestIngressRouteRepair: the node runs a newer activation of the sandbox
// than the request's capability names; the control plane reads the sandbox
// again and retries a GET (and a tunnel) once with a capability for it, and
// refuses to replay a POST with a body.
func TestIngressRouteRepair(t *testing.T) {
	p := newPortPlane(t)
	sb := p.sandbox(sandbox.StateRunning)
	p.expose(sb.ID, 8080, "http", true)
	p.expose(sb.ID, 2222, "tcp", true)
	host := fmt.Sprintf("8080-%s.localhost", sb.ID)

	// move installs a new activation on the node; the store learns it
	// when the node first refuses the old one.
	move := func() *sandbox.Sandbox {
		next := *sb
		next.ActivationID = sandbox.NewActivationID()
		p.node.install(sb.ExecID, identityOf(&next))
		var once sync.Once
		p.node.mu.Lock()
		p.node.onRefresh = func() {
			once.Do(func() {
				cur, err := p.st.GetSandboxByID(context.Background(), sb.ID)
				if err != nil {
					t.Error(err)
					return
				}
				cur.ActivationID = next.ActivationID
				if err := p.st.UpdateSandbox(context.Background(), cur); err != nil {
					t.Error(err)
				}
				*sb = *cur
			})
		}
		p.node.mu.Unlock()
		return &next
	}

	next := move()
	before := p.node.calls.Load()
	guestSaw(t, p.send(http.MethodGet, p.url+"/", host, "", nil))
	if n := p.node.calls.Load() - before; n != 2 {
		t.Errorf("the node saw %d requests, want 2 (refused, then retried)", n)
	}
	if c := p.node.lastCapability(); c.Activation != next.ActivationID {
		t.Errorf("the retry carried activation %s, want %s", c.Activation, next.ActivationID)
	}

	move()
	before = p.node.calls.Load()
	a := p.send(http.MethodPost, p.url+"/", host, "do-not-replay", nil)
	wantError(t, "POST across a route change", a, 503, sandboxv1.CodeRefreshRoute)
	if n := p.node.calls.Load() - before; n != 1 {
		t.Errorf("the node saw %d requests for one POST, want 1 (no replay)", n)
	}

	move()
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(conn, "GET /v1/sandboxes/%s/ports/2222/tcp HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: space-tcp\r\n\r\n", sb.ID)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("tunnel across a route change: %v %v", resp, err)
	}
	conn.Write([]byte("x"))
	conn.(*net.TCPConn).CloseWrite()
	if got, _ := io.ReadAll(br); string(got) != "x|eof" {
		t.Errorf("through the repaired tunnel: %q", got)
	}
}
