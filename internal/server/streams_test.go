package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/coder/websocket"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
	"github.com/spacesandbox/space/api/guest/v1/filesystem/filesystemv1connect"
	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/api/guest/v1/process/processv1connect"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/e2bapi"
	"github.com/spacesandbox/space/internal/sandbox"
)

// holdingGuest is a guest daemon whose streams (process starts, watches)
// stay open until their request ends: what a sandbox's long-lived
// operations look like to the control plane. It records the signals sent.
type holdingGuest struct {
	processv1connect.UnimplementedProcessHandler
	filesystemv1connect.UnimplementedFilesystemHandler

	mu      sync.Mutex
	open    int
	signals []processv1.Signal
	stop    chan struct{} // closed: every stream ends (the test is over)
}

func newHoldingGuest() *holdingGuest {
	return &holdingGuest{stop: make(chan struct{})}
}

func (g *holdingGuest) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(processv1connect.NewProcessHandler(g))
	mux.Handle(filesystemv1connect.NewFilesystemHandler(g))
	return mux
}

func (g *holdingGuest) hold(ctx context.Context) error {
	g.mu.Lock()
	g.open++
	g.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-g.stop:
	}
	g.mu.Lock()
	g.open--
	g.mu.Unlock()
	return context.Canceled
}

func (g *holdingGuest) Start(ctx context.Context, _ *connect.Request[processv1.StartRequest], s *connect.ServerStream[processv1.StartResponse]) error {
	ev := &processv1.ProcessEvent{Event: &processv1.ProcessEvent_Start{Start: &processv1.ProcessEvent_StartEvent{Pid: 42}}}
	if err := s.Send(&processv1.StartResponse{Event: ev}); err != nil {
		return err
	}
	return g.hold(ctx)
}

func (g *holdingGuest) SendSignal(_ context.Context, req *connect.Request[processv1.SendSignalRequest]) (*connect.Response[processv1.SendSignalResponse], error) {
	g.mu.Lock()
	g.signals = append(g.signals, req.Msg.GetSignal())
	g.mu.Unlock()
	return connect.NewResponse(&processv1.SendSignalResponse{}), nil
}

func (g *holdingGuest) WatchDir(ctx context.Context, _ *connect.Request[filesystemv1.WatchDirRequest], s *connect.ServerStream[filesystemv1.WatchDirResponse]) error {
	if err := s.Send(&filesystemv1.WatchDirResponse{Event: &filesystemv1.WatchDirResponse_Start{Start: &filesystemv1.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	return g.hold(ctx)
}

func (g *holdingGuest) openStreams() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// streamPlaneScrapeToken is newStreamPlane's metrics scrape token.
const streamPlaneScrapeToken = "0123456789abcdef0123456789abcdef"

// newStreamPlane is an e2bPlane whose node serves a holdingGuest.
func newStreamPlane(t *testing.T) (*e2bPlane, *holdingGuest) {
	t.Helper()
	p := newE2BPlane(t)
	p.srv.cfg.MetricsToken = streamPlaneScrapeToken // before any request
	g := newHoldingGuest()
	p.node.mu.Lock()
	p.node.guest = g.handler()
	p.node.mu.Unlock()
	t.Cleanup(func() { close(g.stop) }) // before the servers close
	return p, g
}

// restWS opens a WebSocket of the REST API at path with key.
func (p *e2bPlane) restWS(ctx context.Context, path, key string) (*websocket.Conn, *http.Response, error) {
	url := "ws" + strings.TrimPrefix(p.url, "http") + path
	return websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + key}},
		// One connection per WebSocket, as separate clients would have.
		HTTPClient: &http.Client{Transport: &http.Transport{}},
	})
}

// wantTooManyStreams checks that resp is the stream cap's refusal.
func wantTooManyStreams(t *testing.T, what string, resp *http.Response, err error) {
	t.Helper()
	if resp == nil {
		t.Fatalf("%s: no answer (%v); want 429 too_many_streams", what, err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols || resp.StatusCode == http.StatusOK {
		t.Fatalf("%s: HTTP %d, accepted; want 429 too_many_streams", what, resp.StatusCode)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var e sandboxv1.Error
	_ = json.Unmarshal(body, &e)
	if resp.StatusCode != http.StatusTooManyRequests || e.Reason != "too_many_streams" || !strings.Contains(e.Message, "streams open") {
		t.Fatalf("%s: HTTP %d %s; want 429 with reason too_many_streams", what, resp.StatusCode, body)
	}
}

// metricValue is the value of series (name and labels, as exposed) in the
// server's metrics.
func (p *e2bPlane) metricValue(t *testing.T, series string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, p.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+streamPlaneScrapeToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	t.Fatalf("metrics have no %s:\n%s", series, b)
	return ""
}

// TestSandboxStreamCapREST: one sandbox may hold DefaultMaxSandboxStreams
// streams open at the REST API (watches, exec sessions, runs, transfers);
// the next is refused 429 too_many_streams before it reaches the node and
// counted, another sandbox is not affected, and a stream that ends frees
// its slot. An exec session whose client leaves ends (its command killed)
// and frees its slot.
func TestSandboxStreamCapREST(t *testing.T) {
	p, g := newStreamPlane(t)
	a := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	b := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	ctx := t.Context()

	var held []*websocket.Conn
	t.Cleanup(func() { // before the servers close, on a failure too
		for _, c := range held {
			if c != nil {
				c.CloseNow()
			}
		}
	})
	for i := range DefaultMaxSandboxStreams {
		path := "/v1/sandboxes/" + a.ID + "/files/watch?path=/tmp"
		if i%2 == 1 {
			path = "/v1/sandboxes/" + a.ID + "/exec"
		}
		c, resp, err := p.restWS(ctx, path, p.key)
		if err != nil {
			t.Fatalf("stream %d of %d: %v (HTTP %v)", i+1, DefaultMaxSandboxStreams, err, resp)
		}
		if i%2 == 1 {
			if err := wsjsonWrite(ctx, c, sandboxv1.ExecStart{Cmd: []string{"sleep", "600"}}); err != nil {
				t.Fatal(err)
			}
			var m sandboxv1.ExecMessage
			if err := wsjsonRead(ctx, c, &m); err != nil || m.Type != "started" {
				t.Fatalf("exec session %d: %+v %v; want started", i+1, m, err)
			}
		}
		held = append(held, c)
	}
	waitFor(t, "every stream to reach the guest", func() bool { return g.openStreams() == DefaultMaxSandboxStreams })

	extra, resp, err := p.restWS(ctx, "/v1/sandboxes/"+a.ID+"/files/watch?path=/tmp", p.key)
	held = append(held, extra)
	wantTooManyStreams(t, "one watch more", resp, err)
	extra, resp, err = p.restWS(ctx, "/v1/sandboxes/"+a.ID+"/exec", p.key)
	held = append(held, extra)
	wantTooManyStreams(t, "one exec session more", resp, err)
	req, _ := http.NewRequest(http.MethodPost, p.url+"/v1/sandboxes/"+a.ID+"/exec", strings.NewReader(`{"cmd":["true"]}`))
	req.Header.Set("Authorization", "Bearer "+p.key)
	resp, err = http.DefaultClient.Do(req)
	wantTooManyStreams(t, "one run more", resp, err)
	req, _ = http.NewRequest(http.MethodGet, p.url+"/v1/sandboxes/"+a.ID+"/files?path=/etc/hostname", nil)
	req.Header.Set("Authorization", "Bearer "+p.key)
	resp, err = http.DefaultClient.Do(req)
	wantTooManyStreams(t, "one download more", resp, err)
	if got := g.openStreams(); got != DefaultMaxSandboxStreams {
		t.Fatalf("the guest has %d streams open; the refused ones reached it", got)
	}
	if v := p.metricValue(t, `space_sandbox_streams_refused_total{surface="rest"}`); v != "4" {
		t.Errorf("space_sandbox_streams_refused_total{surface=\"rest\"} = %s, want 4", v)
	}

	// Another sandbox of the same tenant is not affected.
	other, resp, err := p.restWS(ctx, "/v1/sandboxes/"+b.ID+"/files/watch?path=/tmp", p.key)
	if err != nil {
		t.Fatalf("a watch on another sandbox while the first is at its cap: %v (HTTP %v)", err, resp)
	}
	waitFor(t, "the other sandbox's watch to reach the guest", func() bool { return g.openStreams() == DefaultMaxSandboxStreams+1 })
	if v := p.metricValue(t, `space_sandbox_streams_open{surface="rest"}`); v != fmt.Sprint(DefaultMaxSandboxStreams+1) {
		t.Errorf("space_sandbox_streams_open{surface=\"rest\"} = %s, want %d", v, DefaultMaxSandboxStreams+1)
	}
	other.CloseNow()

	// An exec session whose client vanishes (no close handshake) ends: its
	// command is killed and its slot freed, though the command prints
	// nothing and would run for ten minutes.
	held[1].CloseNow()
	waitFor(t, "the abandoned exec session to end", func() bool { return p.srv.streams.openCount(a.ID) == DefaultMaxSandboxStreams-1 })
	g.mu.Lock()
	signals := append([]processv1.Signal(nil), g.signals...)
	g.mu.Unlock()
	if len(signals) != 1 || signals[0] != processv1.Signal_SIGNAL_SIGKILL {
		t.Errorf("signals sent to the guest after the client left: %v, want one SIGKILL", signals)
	}
	c, resp, err := p.restWS(ctx, "/v1/sandboxes/"+a.ID+"/files/watch?path=/tmp", p.key)
	if err != nil {
		t.Fatalf("a watch after one stream ended: %v (HTTP %v)", err, resp)
	}
	held[1] = c
	for _, c := range held {
		if c != nil {
			c.CloseNow()
		}
	}
	waitFor(t, "every stream to end", func() bool { return p.srv.streams.openCount(a.ID) == 0 && g.openStreams() == 0 })
}

// TestE2BEnvdStreamCap: the E2B envd surface holds the same per-sandbox cap
// on the requests in flight to a sandbox's guest daemon (process streams,
// watches, transfers): past it, 429 with Connect's resource_exhausted and
// a message naming the cap, counted, and another sandbox unaffected.
func TestE2BEnvdStreamCap(t *testing.T) {
	p, g := newStreamPlane(t)
	a := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	b := p.sandbox(p.tenant, sandbox.StateRunning, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	watch := func(ctx context.Context, id string) (*connect.ServerStreamForClient[filesystemv1.WatchDirResponse], error) {
		hc := &http.Client{Transport: e2bHeaders{id: id, token: p.srv.e2bAPI.AccessToken(id), rt: &http.Transport{}}}
		fs := filesystemv1connect.NewFilesystemClient(hc, p.url)
		s, err := fs.WatchDir(ctx, connect.NewRequest(&filesystemv1.WatchDirRequest{Path: "/tmp"}))
		if err != nil {
			return nil, err
		}
		if !s.Receive() {
			return s, s.Err()
		}
		return s, nil
	}
	var held []*connect.ServerStreamForClient[filesystemv1.WatchDirResponse]
	t.Cleanup(cancel) // before the servers close, on a failure too
	for i := range DefaultMaxSandboxStreams {
		s, err := watch(ctx, a.ID)
		if err != nil {
			t.Fatalf("watch %d of %d: %v", i+1, DefaultMaxSandboxStreams, err)
		}
		held = append(held, s)
	}
	_, err := watch(ctx, a.ID)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "too_many_streams") {
		t.Fatalf("one watch more: %v; want resource_exhausted too_many_streams", err)
	}
	got := p.envd(http.MethodPost, "/process.Process/List", a.ID, p.srv.e2bAPI.AccessToken(a.ID))
	if got.status != http.StatusTooManyRequests || !strings.Contains(got.body, "too_many_streams") {
		t.Fatalf("a short call over the cap: %d %s; want 429 too_many_streams", got.status, got.body)
	}
	if v := p.metricValue(t, `space_sandbox_streams_refused_total{surface="e2b"}`); v != "2" {
		t.Errorf("space_sandbox_streams_refused_total{surface=\"e2b\"} = %s, want 2", v)
	}
	s, err := watch(ctx, b.ID)
	if err != nil {
		t.Fatalf("a watch on another sandbox while the first is at its cap: %v", err)
	}
	s.Close()
	held[0].Close()
	waitFor(t, "a closed watch to free its slot", func() bool { return p.srv.streams.openCount(a.ID) < DefaultMaxSandboxStreams })
	if s, err = watch(ctx, a.ID); err != nil {
		t.Fatalf("a watch after one ended: %v", err)
	}
	held[0] = s
	for _, s := range held {
		s.Close()
	}
	waitFor(t, "every stream to end", func() bool { return p.srv.streams.openCount(a.ID) == 0 && g.openStreams() == 0 })
}

// e2bHeaders routes requests to sandbox id's envd the way E2B SDKs do.
type e2bHeaders struct {
	id, token string
	rt        http.RoundTripper
}

func (h e2bHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(e2bapi.SandboxHeader, h.id)
	r.Header.Set(e2bapi.PortHeader, "49983")
	r.Header.Set(e2bapi.TokenHeader, h.token)
	return h.rt.RoundTrip(r)
}

func wsjsonWrite(ctx context.Context, c *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.Write(ctx, websocket.MessageText, b)
}

func wsjsonRead(ctx context.Context, c *websocket.Conn, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// waitFor waits up to a minute (a bound for a busy machine, not a
// measure) for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
