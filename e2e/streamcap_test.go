package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestSandboxStreamCap (C-6): against a real server, node and guest, one
// sandbox holds at most 256 exec sessions open at the API; the next is
// refused 429 too_many_streams and counted, another sandbox runs commands
// meanwhile, and a session whose client vanished ends and frees its slot.
func TestSandboxStreamCap(t *testing.T) {
	in := startServer(t, newDataDir(t))
	a := in.create("minimal")
	b := in.create("minimal")
	defer in.delete(a.ID)
	defer in.delete(b.ID)
	const cap = 256
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(in.url, "http") + "/v1/sandboxes/" + a.ID + "/exec"
	dial := func() (*websocket.Conn, *http.Response, error) {
		return websocket.Dial(ctx, wsURL, &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {"Bearer " + in.key}},
			HTTPClient: &http.Client{Transport: &http.Transport{}}, // a connection each
		})
	}
	start := func(c *websocket.Conn) error {
		if err := c.Write(ctx, websocket.MessageText, []byte(`{"cmd":["sleep","600"]}`)); err != nil {
			return err
		}
		rctx, done := context.WithTimeout(ctx, 2*time.Minute)
		defer done()
		_, msg, err := c.Read(rctx)
		if err != nil {
			return err
		}
		var m struct{ Type, Message string }
		_ = json.Unmarshal(msg, &m)
		if m.Type != "started" {
			return fmt.Errorf("first message %s, want started", msg)
		}
		return nil
	}
	var held []*websocket.Conn
	defer func() {
		for _, c := range held {
			c.CloseNow()
		}
	}()
	for i := range cap {
		c, resp, err := dial()
		if err != nil {
			t.Fatalf("exec session %d of %d: %v (%v)\n%s", i+1, cap, err, resp, in.logs())
		}
		held = append(held, c)
		if err := start(c); err != nil {
			t.Fatalf("exec session %d of %d: %v\n%s", i+1, cap, err, in.logs())
		}
	}

	c, resp, err := dial()
	if err == nil {
		held = append(held, c)
		t.Fatalf("exec session %d was accepted; want 429 too_many_streams", cap+1)
	}
	var e struct{ Code, Reason, Message string }
	if resp != nil && resp.Body != nil {
		body, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(body, &e)
	}
	if resp == nil || resp.StatusCode != http.StatusTooManyRequests || e.Reason != "too_many_streams" {
		t.Fatalf("exec session %d: %v %+v; want 429 too_many_streams", cap+1, err, e)
	}

	// Another sandbox is not affected.
	if res := in.exec(b.ID, "echo", "ok"); res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "ok" {
		t.Fatalf("exec in another sandbox while the first is at its cap: %+v", res)
	}

	// The refusal is counted.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+in.key)
	mresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !strings.Contains(string(metrics), `space_sandbox_streams_refused_total{surface="rest"} 1`+"\n") ||
		!strings.Contains(string(metrics), fmt.Sprintf(`space_sandbox_streams_open{surface="rest"} %d`+"\n", cap)) {
		t.Errorf("server metrics do not count the refusal and the %d open sessions:\n%s", cap, metrics)
	}

	// A session whose client vanished ends and frees its slot.
	held[0].CloseNow()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, resp, err := dial()
		if err == nil {
			held[0] = c
			if err := start(c); err != nil {
				t.Fatalf("exec session in the freed slot: %v", err)
			}
			break
		}
		if resp == nil || resp.StatusCode != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("no exec session after one client left: %v (%v)", err, resp)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
