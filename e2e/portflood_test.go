package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPortRequestFlood (catalogue C-5/C-6): against a real server, node and
// ns guests, a client of one tenant floods its sandbox's exposed HTTP port
// with requests the port holds open. Each request through ingress holds one
// of its tenant's stream slots for its life: at the tenant's cap (64 here,
// --max-tenant-streams) the next ones are refused 429 too_many_streams
// naming the tenant before the node is reached, counted surface port_http
// in space_tenant_streams_refused_total; another tenant's port keeps
// answering throughout, and once the held requests end the tenant's port
// answers again.
func TestPortRequestFlood(t *testing.T) {
	const (
		tenantCap = 64
		attempts  = 1000 // past the cap
	)
	in := startServerWith(t, newDataDir(t), "--max-tenant-streams", fmt.Sprint(tenantCap))
	out, stderr, c := in.cli("", "tenant", "create", "flooder")
	if c != 0 {
		t.Fatalf("tenant create: %d %s", c, stderr)
	}
	key := strings.TrimSpace(out)
	flooded := in.createWithKey(key)
	neighbour := in.create("minimal").ID
	defer in.doKey(key, "DELETE", "/v1/sandboxes/"+flooded, nil, nil)
	defer in.delete(neighbour)

	server := buildTestBinary(t, "connflood")
	hosts := map[string]string{} // sandbox id -> ingress Host
	tokens := map[string]string{}
	for id, k := range map[string]string{flooded: key, neighbour: in.key} {
		if code := in.doKey(k, "PUT", "/v1/sandboxes/"+id+"/files?path=/usr/local/bin/connflood", server, nil); code/100 != 2 {
			t.Fatalf("upload connflood: HTTP %d", code)
		}
		var res execResult
		if code := in.doKey(k, "POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"cmd": []string{"/bin/sh", "-c", "chmod 755 /usr/local/bin/connflood && (connflood http :8080 </dev/null >/dev/null 2>&1 &)"}}, &res); code != http.StatusOK || res.ExitCode != 0 {
			t.Fatalf("start the port's server: HTTP %d %+v", code, res)
		}
		var p servicePort
		if code := in.doKey(k, "POST", "/v1/sandboxes/"+id+"/ports", map[string]any{"port": 8080}, &p); code != http.StatusCreated || p.Token == "" {
			t.Fatalf("expose 8080: HTTP %d %+v", code, p)
		}
		hosts[id], tokens[id] = fmt.Sprintf("8080-%s.localhost", id), p.Token
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// request sends GET path to sandbox id's port; a held request's answer
	// is returned with its first line read, its body open.
	request := func(ctx context.Context, id, path string) (*http.Response, string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.url+path, nil)
		req.Host = hosts[id]
		req.Header.Set("X-Space-Port-Token", tokens[id])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, "", err
		}
		if resp.StatusCode != http.StatusOK || path != "/hold" {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp, string(b), nil
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		return resp, line, err
	}
	portWorks := func(id, when string) {
		t.Helper()
		var resp *http.Response
		var body string
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) { // the server starts in the background
			resp, body, err = request(ctx, id, "/")
			if (err == nil && resp.StatusCode == http.StatusOK) || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || resp.StatusCode != http.StatusOK || body != "ok\n" {
			t.Fatalf("%s: a request to %s's port: %v %q", when, id, err, body)
		}
	}
	portWorks(flooded, "before the flood")
	portWorks(neighbour, "before the flood")

	// The tenant's cap: 64 requests held.
	var held []*http.Response
	defer func() {
		for _, r := range held {
			r.Body.Close()
		}
	}()
	for i := range tenantCap {
		resp, line, err := request(ctx, flooded, "/hold")
		if err != nil || resp.StatusCode != http.StatusOK || line != "held\n" {
			t.Fatalf("held request %d of %d: %v %+v %q\n%s", i+1, tenantCap, err, resp, line, in.logs())
		}
		held = append(held, resp)
	}
	// The rest, from 16 clients, while the neighbour's port answers.
	var next, refused atomic.Int64
	var floodErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for next.Add(1) <= attempts {
				resp, body, err := request(ctx, flooded, "/hold")
				if err == nil && resp.StatusCode == http.StatusTooManyRequests && strings.Contains(body, `"reason":"too_many_streams"`) && strings.Contains(body, "has 64 streams open across its sandboxes") {
					refused.Add(1)
					continue
				}
				if resp != nil && resp.StatusCode == http.StatusOK {
					resp.Body.Close()
				}
				mu.Lock()
				if floodErr == nil {
					floodErr = fmt.Errorf("a request past the tenant's cap: %v, %q; want 429 too_many_streams naming the tenant's cap", err, body)
				}
				mu.Unlock()
				return
			}
		})
	}
	portWorks(neighbour, "during the flood")
	wg.Wait()
	if floodErr != nil {
		t.Fatalf("%v\n%s", floodErr, in.logs())
	}
	t.Logf("port request flood: %d held, %d refused 429 too_many_streams", len(held), refused.Load())
	portWorks(neighbour, "with the flooding tenant at its cap")
	metrics := in.metricsText(t)
	if got := metricOf(metrics, `space_tenant_streams_refused_total{surface="port_http"}`); got != attempts {
		t.Errorf(`space_tenant_streams_refused_total{surface="port_http"} = %d, want the %d refusals`, got, attempts)
	}
	if got := metricOf(metrics, `space_sandbox_streams_open{surface="port_http"}`); got != tenantCap {
		t.Errorf(`space_sandbox_streams_open{surface="port_http"} = %d, want the %d held requests`, got, tenantCap)
	}

	// Once the held requests end their slots are free.
	for _, r := range held {
		r.Body.Close()
	}
	held = nil
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if metricOf(in.metricsText(t), `space_sandbox_streams_open{surface="port_http"}`) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the held requests ended: %d port requests still open", metricOf(in.metricsText(t), `space_sandbox_streams_open{surface="port_http"}`))
		}
	}
	portWorks(flooded, "after the flood")
}
