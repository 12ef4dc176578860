package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestStreamFlood (catalogue C-5/C-6): against a real server, node and ns
// guests, the client of one tenant opens 10,000 streams — file watches and
// exec sessions over WebSockets — over five of its sandboxes. The guest's
// watcher cap refuses the 65th watch in one sandbox, the API's per-sandbox
// cap the 257th stream, and the per-tenant cap every stream past 1,024
// across the sandboxes: each 429 too_many_streams with a message saying
// which cap and what to do, the refusals counted. Meanwhile another
// tenant's exec and watch work; the server's fds and RSS stay bounded; once
// the client closes everything, the fds come back to the baseline.
func TestStreamFlood(t *testing.T) {
	const (
		attempts    = 10000
		guestCap    = 64   // guestd's MaxWatchers
		sandboxCap  = 256  // server.DefaultMaxSandboxStreams
		tenantCap   = 1024 // server.DefaultMaxTenantStreams
		sandboxes   = 5
		fullSandbox = tenantCap / sandboxCap // sandboxes filled to their own cap
	)
	testStart := time.Now()
	in := startServer(t, newDataDir(t))
	out, stderr, c := in.cli("", "tenant", "create", "flooder")
	if c != 0 {
		t.Fatalf("tenant create: %d %s", c, stderr)
	}
	key := strings.TrimSpace(out)

	ids := make([]string, sandboxes)
	var wg sync.WaitGroup
	errs := make([]error, sandboxes+1)
	for i := range sandboxes {
		wg.Go(func() {
			var sb sandbox
			body, _ := json.Marshal(map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 256})
			code, b := rawDo(key, http.MethodPost, in.url+"/v1/sandboxes", string(body))
			if code != http.StatusCreated {
				errs[i] = fmt.Errorf("create sandbox %d: HTTP %d %s", i, code, b)
				return
			}
			_ = json.Unmarshal([]byte(b), &sb)
			ids[i] = sb.ID
		})
	}
	var neighbour sandbox
	wg.Go(func() {
		body, _ := json.Marshal(map[string]any{"template": "minimal", "runtime": "ns", "memory_mib": 256})
		code, b := rawDo(in.key, http.MethodPost, in.url+"/v1/sandboxes", string(body))
		if code != http.StatusCreated {
			errs[sandboxes] = fmt.Errorf("create the neighbour: HTTP %d %s", code, b)
			return
		}
		_ = json.Unmarshal([]byte(b), &neighbour)
	})
	wg.Wait()
	defer func() {
		for _, id := range ids {
			if id != "" {
				rawDo(key, http.MethodDelete, in.url+"/v1/sandboxes/"+id, "")
			}
		}
		if neighbour.ID != "" {
			in.delete(neighbour.ID)
		}
	}()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("6 sandboxes created %.1fs after the start", time.Since(testStart).Seconds())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	baseFDs, baseRSS, baseKinds := in.openFDs(t), in.rssKiB(t), in.fdKinds(t)
	t.Logf("server baseline: %d fds, %d MiB RSS", baseFDs, baseRSS>>10)

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}} // refusals reuse connections
	var (
		heldMu sync.Mutex
		held   []*websocket.Conn
	)
	closeAll := func() {
		heldMu.Lock()
		defer heldMu.Unlock()
		for _, c := range held {
			c.CloseNow()
		}
		held = nil
		client.CloseIdleConnections()
		http.DefaultClient.CloseIdleConnections()
	}
	defer closeAll()
	// open opens a watch or an exec session on sandbox id with k: nil and
	// the refusal's reason and message, or an error if it neither opened
	// nor was refused with a JSON error.
	open := func(k, id string, exec bool) (refused *apiError, err error) {
		path := "/v1/sandboxes/" + id + "/files/watch?path=/tmp"
		if exec {
			path = "/v1/sandboxes/" + id + "/exec"
		}
		ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(in.url, "http")+path, &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {"Bearer " + k}},
			HTTPClient: client,
		})
		if err != nil {
			if resp == nil {
				return nil, err
			}
			var e apiError
			body, _ := io.ReadAll(resp.Body)
			if jerr := json.Unmarshal(body, &e); jerr != nil || e.Reason == "" {
				return nil, fmt.Errorf("HTTP %d %.300s: %v", resp.StatusCode, body, err)
			}
			e.Status = resp.StatusCode
			return &e, nil
		}
		heldMu.Lock()
		held = append(held, ws)
		heldMu.Unlock()
		if exec {
			if err := ws.Write(ctx, websocket.MessageText, []byte(`{"cmd":["sleep","600"]}`)); err != nil {
				return nil, err
			}
			rctx, done := context.WithTimeout(ctx, time.Minute)
			defer done()
			_, msg, err := ws.Read(rctx)
			if err != nil {
				return nil, err
			}
			if !strings.Contains(string(msg), `"started"`) {
				return nil, fmt.Errorf("exec session: first message %s, want started", msg)
			}
		}
		return nil, nil
	}
	wantRefused := func(what string, e *apiError, err error, cap string) {
		t.Helper()
		if err != nil || e == nil {
			t.Fatalf("%s: opened or failed (%v); want 429 too_many_streams (%s)", what, err, cap)
		}
		if e.Status != http.StatusTooManyRequests || e.Reason != "too_many_streams" || !strings.Contains(e.Message, cap) {
			t.Fatalf("%s: HTTP %d %s %q; want 429 too_many_streams naming %q", what, e.Status, e.Reason, e.Message, cap)
		}
	}

	// The neighbour (another tenant) keeps working throughout.
	neighbourOK := func(when string) {
		t.Helper()
		if res := in.exec(neighbour.ID, "echo", "ok"); res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "ok" {
			t.Fatalf("the neighbour's exec %s: %+v", when, res)
		}
		if e, err := open(in.key, neighbour.ID, false); err != nil || e != nil {
			t.Fatalf("the neighbour's watch %s: %v %+v", when, err, e)
		}
	}
	neighbourOK("before the flood")

	// The guest's cap: 64 watches in one sandbox, the 65th refused.
	tried := 0
	for i := range guestCap {
		tried++
		if e, err := open(key, ids[0], false); err != nil || e != nil {
			t.Fatalf("watch %d of %d: %v %+v\n%s", i+1, guestCap, err, e, in.logs())
		}
	}
	tried++
	e65, err := open(key, ids[0], false)
	wantRefused("watch 65 in one sandbox", e65, err, "directory watchers")
	t.Logf("watch 65 in one sandbox: HTTP %d %s: %s", e65.Status, e65.Reason, e65.Message)

	// Fill the sandboxes to their own cap with exec sessions (and the
	// guest's 64 watches each), four of them reaching the tenant's cap.
	fill := func(id string, watches int) error {
		for range watches {
			if e, err := open(key, id, false); err != nil || e != nil {
				return fmt.Errorf("watch on %s: %v %+v", id, err, e)
			}
		}
		for range sandboxCap - guestCap {
			if e, err := open(key, id, true); err != nil || e != nil {
				return fmt.Errorf("exec session on %s: %v %+v", id, err, e)
			}
		}
		return nil
	}
	fillErrs := make([]error, fullSandbox)
	for i := range fullSandbox {
		watches := guestCap
		if i == 0 {
			watches = 0 // its 64 are open
		}
		wg.Go(func() { fillErrs[i] = fill(ids[i], watches) })
	}
	wg.Wait()
	tried += tenantCap - guestCap
	for _, err := range fillErrs {
		if err != nil {
			t.Fatalf("%v\n%s", err, in.logs())
		}
	}
	t.Logf("%d streams held %.1fs after the start", tenantCap, time.Since(testStart).Seconds())
	e, err := open(key, ids[0], true)
	tried++
	wantRefused("exec session 257 in one sandbox", e, err, "sandbox "+ids[0]+" has 256 streams open")
	t.Logf("stream 257 in one sandbox: HTTP %d %s: %s", e.Status, e.Reason, e.Message)
	e, err = open(key, ids[fullSandbox], false)
	tried++
	wantRefused("a watch on a fifth sandbox past the tenant's cap", e, err, "across its sandboxes")
	t.Logf("stream 1,025 of the tenant: HTTP %d %s: %s", e.Status, e.Reason, e.Message)
	neighbourOK("with the flooding tenant at its cap")

	// The rest of the 10,000, as fast as 16 clients go, with the neighbour
	// working meanwhile.
	var next atomic.Int64
	next.Store(int64(tried))
	var sandboxRefused, tenantRefused atomic.Int64
	var floodErr error
	var floodMu sync.Mutex
	peakFDs, peakRSS := 0, 0
	for w := range 16 {
		wg.Go(func() {
			for n := next.Add(1); n <= attempts; n = next.Add(1) {
				id := ids[int(n)%sandboxes]
				e, err := open(key, id, (int(n)+w)%2 == 0)
				switch {
				case err == nil && e != nil && e.Status == http.StatusTooManyRequests && strings.Contains(e.Message, "across its sandboxes"):
					tenantRefused.Add(1)
				case err == nil && e != nil && e.Status == http.StatusTooManyRequests && strings.Contains(e.Message, "256 streams open"):
					sandboxRefused.Add(1)
				default:
					floodMu.Lock()
					if floodErr == nil {
						floodErr = fmt.Errorf("attempt %d on %s: %v %+v; want 429 too_many_streams", n, id, err, e)
					}
					floodMu.Unlock()
					return
				}
			}
		})
	}
	neighbourDone := make(chan struct{})
	go func() {
		defer close(neighbourDone)
		for next.Load() < attempts {
			if res := in.exec(neighbour.ID, "echo", "ok"); res.ExitCode != 0 {
				floodMu.Lock()
				floodErr = fmt.Errorf("the neighbour's exec during the flood: %+v", res)
				floodMu.Unlock()
				return
			}
			fds, rss := in.openFDs(t), in.rssKiB(t)
			floodMu.Lock()
			peakFDs, peakRSS = max(peakFDs, fds), max(peakRSS, rss)
			floodMu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	wg.Wait()
	<-neighbourDone
	if floodErr != nil {
		t.Fatalf("%v\n%s", floodErr, in.logs())
	}
	neighbourOK("after the flood")
	fds, rss := in.openFDs(t), in.rssKiB(t)
	peakFDs, peakRSS = max(peakFDs, fds), max(peakRSS, rss)
	t.Logf("%d attempts %.1fs after the start: %d held, %d refused (the guest's cap 1, the sandbox's cap %d, the tenant's cap %d)",
		attempts, time.Since(testStart).Seconds(), tenantCap, attempts-tenantCap, sandboxRefused.Load()+1, tenantRefused.Load()+1)
	t.Logf("server at peak: %d fds (baseline %d), %d MiB RSS (baseline %d MiB)", peakFDs, baseFDs, peakRSS>>10, baseRSS>>10)
	if got := 1 + 1 + 1 + sandboxRefused.Load() + tenantRefused.Load(); got != attempts-tenantCap {
		t.Fatalf("refused %d of %d attempts past the caps", got, attempts-tenantCap)
	}
	// Each held stream costs the server a handful of fds (the client's
	// connection, the node's, the bridge's): bounded by the tenant's cap,
	// not by the 10,000 attempts.
	if peakFDs > baseFDs+5*tenantCap {
		t.Errorf("the server's fds peaked at %d from %d; want at most %d (5 per held stream)", peakFDs, baseFDs, baseFDs+5*tenantCap)
	}
	if peakRSS > baseRSS+512<<10 {
		t.Errorf("the server's RSS peaked at %d MiB from %d MiB; want at most 512 MiB more", peakRSS>>10, baseRSS>>10)
	}

	// The refusals are counted.
	metrics := in.metricsText(t)
	for series, want := range map[string]int64{
		`space_tenant_streams_refused_total{surface="rest"}`:  tenantRefused.Load() + 1,
		`space_sandbox_streams_refused_total{surface="rest"}`: sandboxRefused.Load() + 1,
		`space_sandbox_streams_open{surface="rest"}`:          tenantCap + 3, // and the neighbour's 3 watches
	} {
		if got := metricOf(metrics, series); got != want {
			t.Errorf("%s = %d, want %d", series, got, want)
		}
	}

	// Once the client closes everything, it is all released but the idle
	// connections the server keeps for reuse, until their 90 s idle
	// timeout: 64 to the node (nodeclient; both ends are in this process
	// under --dev) and 16 to each sandbox's host bridge (node/bridgeconn).
	// Waited out once, the fds were back to 10 over the baseline.
	closeAll()
	idlePools := 2*64 + 16*(sandboxes+1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		metrics := in.metricsText(t)
		fds := in.openFDs(t)
		if metricOf(metrics, `space_sandbox_streams_open{surface="rest"}`) == 0 && fds <= baseFDs+idlePools+32 {
			t.Logf("released %.1fs after the start: %d fds (baseline %d), %d MiB RSS", time.Since(testStart).Seconds(), fds, baseFDs, in.rssKiB(t)>>10)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the client closed: %d fds, want at most %d (baseline %d: %s, idle pools %d), %d streams open: %s", fds, baseFDs+idlePools+32, baseFDs, baseKinds, idlePools, metricOf(metrics, `space_sandbox_streams_open{surface="rest"}`), in.fdKinds(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The tenant can open streams again.
	if e, err := open(key, ids[fullSandbox], true); err != nil || e != nil {
		t.Fatalf("an exec session after the flood: %v %+v", err, e)
	}
	closeAll()
}

// apiError is an error answer of the REST API.
type apiError struct {
	Status                int `json:"-"`
	Code, Reason, Message string
}

// rawDo sends one request with key and returns the status and body; 0 and
// the error for no answer.
func rawDo(key, method, url, body string) (int, string) {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// rssKiB is the server process's resident memory.
func (in *instance) rssKiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", in.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatal("no VmRSS in the server's status")
	return 0
}

// metricsText is the server's /metrics.
func (in *instance) metricsText(t *testing.T) string {
	t.Helper()
	code, body := rawDo(in.key, http.MethodGet, in.url+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d %.200s", code, body)
	}
	return body
}

// metricOf is series' value in metrics (-1: absent).
func metricOf(metrics, series string) int64 {
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int64(n)
		}
	}
	return -1
}

// fdKinds summarises what the server's open fds are (socket, pipe, anon
// inode, file): what a leak is made of.
func (in *instance) fdKinds(t *testing.T) string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", in.cmd.Process.Pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, fd := range fds {
		target, err := os.Readlink(dir + "/" + fd.Name())
		if err != nil {
			continue
		}
		kind, _, _ := strings.Cut(target, ":")
		if strings.HasPrefix(target, "/") {
			kind = target
		}
		kinds[kind]++
	}
	return fmt.Sprint(kinds)
}
