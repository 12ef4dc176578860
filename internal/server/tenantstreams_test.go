package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
	"github.com/spacesandbox/space/api/guest/v1/filesystem/filesystemv1connect"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// TestStreamLimiterTenantCap: a tenant's streams across its sandboxes stop
// at the tenant cap even where each sandbox is under its own; the refusal
// names the tenant and the cap, is counted apart from the sandbox cap's,
// and leaves another tenant alone; a release (once, however often it is
// called) frees both slots.
func TestStreamLimiterTenantCap(t *testing.T) {
	l := newStreamLimiter(2, 3)
	var releases []func()
	take := func(surface, tenant, id string) error {
		rel, err := l.acquire(surface, tenant, id)
		if err == nil {
			releases = append(releases, rel)
		}
		return err
	}
	for _, id := range []string{"sb-a", "sb-a", "sb-b"} {
		if err := take(surfaceREST, "t-1", id); err != nil {
			t.Fatalf("stream on %s: %v", id, err)
		}
	}
	err := take(surfaceREST, "t-1", "sb-a")
	if !errors.Is(err, errdefs.ErrTooManyStreams) || !strings.Contains(err.Error(), "sandbox sb-a has 2 streams open") {
		t.Fatalf("a third stream on sb-a: %v; want the sandbox cap's refusal", err)
	}
	for _, surface := range []string{surfaceREST, surfaceTCP} {
		id := "sb-c"
		if surface == surfaceTCP {
			id = ""
		}
		err = take(surface, "t-1", id)
		if !errors.Is(err, errdefs.ErrTooManyStreams) || !strings.Contains(err.Error(), "tenant t-1 has 3 streams open across its sandboxes") || !strings.Contains(err.Error(), "--max-tenant-streams") {
			t.Fatalf("a %s stream past the tenant cap: %v; want the tenant cap's refusal", surface, err)
		}
	}
	if err := take(surfaceE2B, "t-2", "sb-z"); err != nil {
		t.Fatalf("another tenant's stream while t-1 is at its cap: %v", err)
	}
	var b strings.Builder
	l.write(&b)
	for _, want := range []string{
		`space_sandbox_streams_refused_total{surface="rest"} 1`,
		`space_tenant_streams_refused_total{surface="rest"} 1`,
		`space_tenant_streams_refused_total{surface="tcp"} 1`,
		`space_tenant_streams_refused_total{surface="e2b"} 0`,
		`space_sandbox_streams_open{surface="rest"} 3`,
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("metrics have no %q:\n%s", want, b.String())
		}
	}
	releases[2]()
	releases[2]() // a second call frees nothing more
	if got := l.tenantCount("t-1"); got != 2 {
		t.Fatalf("t-1 holds %d streams after one release (called twice), want 2", got)
	}
	if err := take(surfaceTCP, "t-1", ""); err != nil {
		t.Fatalf("a tunnel in the freed tenant slot: %v", err)
	}
	for _, rel := range releases {
		rel()
	}
	if l.tenantCount("t-1") != 0 || l.tenantCount("t-2") != 0 || l.openCount("sb-a") != 0 || len(l.tenant) != 0 || len(l.open) != 0 {
		t.Fatalf("after every release: tenants %v, sandboxes %v; want none", l.tenant, l.open)
	}
}

// TestTenantStreamCapREST: through the REST API, a tenant's watches and
// exec sessions spread over its sandboxes stop at the tenant cap (429
// too_many_streams naming the tenant) before they reach the node, counted;
// another tenant's stream is accepted meanwhile, and a closed stream frees
// its tenant slot.
func TestTenantStreamCapREST(t *testing.T) {
	p, g := newStreamPlane(t)
	const perSandbox, perTenant = 4, 6
	p.srv.streams = newStreamLimiter(perSandbox, perTenant) // before any request
	a := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	b := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	c := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	o := p.sandbox(p.otherTenant, sandbox.StateRunning, nil)
	ctx := t.Context()
	var held []*websocket.Conn
	t.Cleanup(func() {
		for _, c := range held {
			if c != nil {
				c.CloseNow()
			}
		}
	})
	open := func(id, key string, exec bool) (*websocket.Conn, *http.Response, error) {
		path := "/v1/sandboxes/" + id + "/files/watch?path=/tmp"
		if exec {
			path = "/v1/sandboxes/" + id + "/exec"
		}
		ws, resp, err := p.restWS(ctx, path, key)
		if err != nil || !exec {
			return ws, resp, err
		}
		if err := wsjsonWrite(ctx, ws, sandboxv1.ExecStart{Cmd: []string{"sleep", "600"}}); err != nil {
			return ws, resp, err
		}
		var m sandboxv1.ExecMessage
		if err := wsjsonRead(ctx, ws, &m); err != nil || m.Type != "started" {
			return ws, resp, fmt.Errorf("exec session: %+v %v; want started", m, err)
		}
		return ws, resp, nil
	}
	for i, id := range []string{a.ID, a.ID, a.ID, a.ID, b.ID, b.ID} {
		ws, resp, err := open(id, p.key, i%2 == 1)
		if err != nil {
			t.Fatalf("stream %d of %d: %v (HTTP %v)", i+1, perTenant, err, resp)
		}
		held = append(held, ws)
	}
	waitFor(t, "every stream to reach the guest", func() bool { return g.openStreams() == perTenant })
	for _, exec := range []bool{false, true} {
		ws, resp, err := open(c.ID, p.key, exec)
		held = append(held, ws)
		wantTooManyStreams(t, fmt.Sprintf("a stream on a third sandbox past the tenant cap (exec %v)", exec), resp, err)
	}
	if got := g.openStreams(); got != perTenant {
		t.Fatalf("the guest has %d streams open; the refused ones reached it", got)
	}
	if v := p.metricValue(t, `space_tenant_streams_refused_total{surface="rest"}`); v != "2" {
		t.Errorf("space_tenant_streams_refused_total{surface=\"rest\"} = %s, want 2", v)
	}
	if v := p.metricValue(t, `space_sandbox_streams_refused_total{surface="rest"}`); v != "0" {
		t.Errorf("space_sandbox_streams_refused_total{surface=\"rest\"} = %s, want 0 (no sandbox was at its own cap)", v)
	}
	// The refusal's message names the tenant cap.
	req, _ := http.NewRequest(http.MethodPost, p.url+"/v1/sandboxes/"+c.ID+"/exec", strings.NewReader(`{"cmd":["true"]}`))
	req.Header.Set("Authorization", "Bearer "+p.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"reason":"too_many_streams"`) || !strings.Contains(string(body), "tenant "+p.tenant+" has 6 streams open across its sandboxes") {
		t.Fatalf("a run past the tenant cap: HTTP %d %s; want 429 too_many_streams naming the tenant", resp.StatusCode, body)
	}

	// Another tenant is not affected.
	ws, resp, err := open(o.ID, p.other, true)
	if err != nil {
		t.Fatalf("another tenant's exec session while the first is at its cap: %v (HTTP %v)", err, resp)
	}
	held = append(held, ws)

	// A closed stream frees its tenant's slot, on another sandbox too.
	held[0].CloseNow()
	waitFor(t, "a closed watch to free its slot", func() bool { return p.srv.streams.tenantCount(p.tenant) == perTenant-1 })
	ws, resp, err = open(c.ID, p.key, false)
	if err != nil {
		t.Fatalf("a watch on the third sandbox after one stream ended: %v (HTTP %v)", err, resp)
	}
	held[0] = ws
	for _, c := range held {
		if c != nil {
			c.CloseNow()
		}
	}
	waitFor(t, "every stream to end", func() bool { return p.srv.streams.tenantCount(p.tenant) == 0 && g.openStreams() == 0 })
}

// TestIngressTCPTenantCap: TCP tunnels through the API count against the
// sandbox's tenant: past its cap the next tunnel is refused 429
// too_many_streams before the node is dialled, counted (surface tcp); a
// closed tunnel frees its slot.
func TestIngressTCPTenantCap(t *testing.T) {
	p := newPortPlane(t)
	p.srv.streams = newStreamLimiter(0, 2) // before any request
	sb := p.sandbox(sandbox.StateRunning)
	sp := p.expose(sb.ID, 2222, "tcp", false)
	tunnel := func() (net.Conn, *http.Response, string) {
		t.Helper()
		conn, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		fmt.Fprintf(conn, "GET /v1/sandboxes/%s/ports/2222/tcp HTTP/1.1\r\nHost: %s\r\n%s: %s\r\nConnection: Upgrade\r\nUpgrade: space-tcp\r\n\r\n", sb.ID, p.addr, sandboxv1.PortTokenHeader, sp.Token)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		var body []byte
		if resp.StatusCode != http.StatusSwitchingProtocols {
			body, _ = io.ReadAll(resp.Body)
		}
		return conn, resp, string(body)
	}
	var held []net.Conn
	for i := range 2 {
		conn, resp, body := tunnel()
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("tunnel %d of 2: HTTP %d %s", i+1, resp.StatusCode, body)
		}
		held = append(held, conn)
	}
	waitFor(t, "both tunnels to be counted", func() bool { return p.srv.streams.tenantCount(p.tenant) == 2 })
	_, resp, body := tunnel()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, `"reason":"too_many_streams"`) || !strings.Contains(body, "tenant "+p.tenant+" has 2 streams open") {
		t.Fatalf("a third tunnel: HTTP %d %s; want 429 too_many_streams naming the tenant", resp.StatusCode, body)
	}
	var b strings.Builder
	p.srv.streams.write(&b)
	if !strings.Contains(b.String(), `space_tenant_streams_refused_total{surface="tcp"} 1`+"\n") {
		t.Errorf("the refused tunnel is not counted:\n%s", b.String())
	}
	held[0].Close()
	waitFor(t, "a closed tunnel to free its slot", func() bool { return p.srv.streams.tenantCount(p.tenant) == 1 })
	if _, resp, body := tunnel(); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("a tunnel after one closed: HTTP %d %s", resp.StatusCode, body)
	}
}

// TestIngressHTTPTenantCap: HTTP requests to exposed ports (the port URL and
// the path form) count against the sandbox's tenant for their life, an
// upgraded WebSocket until it closes: past the tenant's cap the next request
// is refused 429 too_many_streams naming the tenant before the node sees it,
// counted (surface port_http); a finished request and a closed WebSocket
// free their slots.
func TestIngressHTTPTenantCap(t *testing.T) {
	p := newPortPlane(t)
	p.srv.streams = newStreamLimiter(0, 2) // before any request
	sb := p.sandbox(sandbox.StateRunning)
	p.expose(sb.ID, 8080, "http", true)
	host := fmt.Sprintf("8080-%s.localhost", sb.ID)
	if a := p.send(http.MethodGet, p.url+"/plain", host, "", nil); a.status != http.StatusOK {
		t.Fatalf("a request under the cap: HTTP %d %s", a.status, a.body)
	}
	// The handler frees its slot as it returns, just after the client has
	// the answer: wait for it rather than read the count at once.
	waitFor(t, "a finished request to free its tenant's slot", func() bool { return p.srv.streams.tenantCount(p.tenant) == 0 })
	webSocket := func() net.Conn {
		t.Helper()
		conn, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", host)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			body, _ := io.ReadAll(resp.Body)
			t.Fatalf("a WebSocket under the cap: HTTP %d %s", resp.StatusCode, body)
		}
		return conn
	}
	held := []net.Conn{webSocket(), webSocket()}
	waitFor(t, "both WebSockets to be counted", func() bool { return p.srv.streams.tenantCount(p.tenant) == 2 })
	calls := p.node.calls.Load()
	for _, a := range []answer{
		p.send(http.MethodGet, p.url+"/third", host, "", nil),
		p.send(http.MethodGet, p.url+"/v1/sandboxes/"+sb.ID+"/ports/8080/proxy/third", "", "", nil),
	} {
		if a.status != http.StatusTooManyRequests || !strings.Contains(a.body, `"reason":"too_many_streams"`) || !strings.Contains(a.body, "tenant "+p.tenant+" has 2 streams open") {
			t.Fatalf("a request past the tenant's cap: HTTP %d %s; want 429 too_many_streams naming the tenant", a.status, a.body)
		}
	}
	if n := p.node.calls.Load() - calls; n != 0 {
		t.Errorf("the node saw %d requests refused by the tenant's cap", n)
	}
	var b strings.Builder
	p.srv.streams.write(&b)
	if !strings.Contains(b.String(), `space_tenant_streams_refused_total{surface="port_http"} 2`+"\n") ||
		!strings.Contains(b.String(), `space_sandbox_streams_open{surface="port_http"} 2`+"\n") {
		t.Errorf("the refused requests or the open WebSockets are not counted under port_http:\n%s", b.String())
	}
	held[0].Close()
	waitFor(t, "a closed WebSocket to free its slot", func() bool { return p.srv.streams.tenantCount(p.tenant) == 1 })
	if a := p.send(http.MethodGet, p.url+"/after", host, "", nil); a.status != http.StatusOK {
		t.Fatalf("a request after a WebSocket closed: HTTP %d %s", a.status, a.body)
	}
}

// refusingGuest refuses every watch the way guestd does at its watcher cap.
type refusingGuest struct {
	filesystemv1connect.UnimplementedFilesystemHandler
}

func (refusingGuest) WatchDir(context.Context, *connect.Request[filesystemv1.WatchDirRequest], *connect.ServerStream[filesystemv1.WatchDirResponse]) error {
	return connect.NewError(connect.CodeResourceExhausted, errors.New("64 directory watchers already exist: limit reached"))
}

// TestWatchGuestCapRefusal: a watch the guest refuses at its watcher cap is
// answered before the WebSocket opens, 429 too_many_streams saying what to
// do, not a WebSocket that opens and closes (or a 503), and it frees its
// API stream slot.
func TestWatchGuestCapRefusal(t *testing.T) {
	p, _ := newStreamPlane(t)
	mux := http.NewServeMux()
	mux.Handle(filesystemv1connect.NewFilesystemHandler(refusingGuest{}))
	p.node.mu.Lock()
	p.node.guest = mux
	p.node.mu.Unlock()
	sb := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	ws, resp, err := p.restWS(t.Context(), "/v1/sandboxes/"+sb.ID+"/files/watch?path=/tmp", p.key)
	if ws != nil {
		ws.CloseNow()
	}
	if resp == nil {
		t.Fatalf("a watch past the guest's cap: no answer (%v)", err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		t.Fatalf("a watch past the guest's cap: HTTP 101, opened as a WebSocket; want 429 too_many_streams before it opens")
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"reason":"too_many_streams"`) ||
		!strings.Contains(string(body), "64 directory watchers already exist") || !strings.Contains(string(body), "close a watch first") {
		t.Fatalf("a watch past the guest's cap: HTTP %d %s; want 429 too_many_streams naming the guest's cap", resp.StatusCode, body)
	}
	waitFor(t, "the refused watch to free its slot", func() bool { return p.srv.streams.openCount(sb.ID) == 0 })
}

// TestE2BEnvdTenantCap: envd requests through the E2B data plane count
// against their sandbox's tenant: past the tenant's cap across its
// sandboxes the next is refused resource_exhausted too_many_streams naming
// the tenant, counted (surface e2b); another tenant's is accepted.
func TestE2BEnvdTenantCap(t *testing.T) {
	p, _ := newStreamPlane(t)
	p.srv.streams = newStreamLimiter(0, 2) // before any request
	a := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	b := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	c := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	o := p.sandbox(p.otherTenant, sandbox.StateRunning, nil)
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel) // before the servers close, on a failure too
	watch := func(id string) error {
		hc := &http.Client{Transport: e2bHeaders{id: id, token: p.srv.e2bAPI.AccessToken(id), rt: &http.Transport{}}}
		fs := filesystemv1connect.NewFilesystemClient(hc, p.url)
		s, err := fs.WatchDir(ctx, connect.NewRequest(&filesystemv1.WatchDirRequest{Path: "/tmp"}))
		if err != nil {
			return err
		}
		if !s.Receive() {
			return s.Err()
		}
		return nil
	}
	for _, id := range []string{a.ID, b.ID} {
		if err := watch(id); err != nil {
			t.Fatalf("watch on %s: %v", id, err)
		}
	}
	err := watch(c.ID)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "too_many_streams") || !strings.Contains(err.Error(), "tenant "+p.tenant+" has 2 streams open across its sandboxes") {
		t.Fatalf("a watch on a third sandbox past the tenant cap: %v; want resource_exhausted too_many_streams naming the tenant", err)
	}
	if v := p.metricValue(t, `space_tenant_streams_refused_total{surface="e2b"}`); v != "1" {
		t.Errorf("space_tenant_streams_refused_total{surface=\"e2b\"} = %s, want 1", v)
	}
	if err := watch(o.ID); err != nil {
		t.Fatalf("another tenant's watch while the first is at its cap: %v", err)
	}
	cancel()
	waitFor(t, "every stream to end", func() bool { return p.srv.streams.tenantCount(p.tenant) == 0 })
}
