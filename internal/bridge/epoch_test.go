package bridge

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
)

// TestNoRequestsAcrossAnEpoch (E-11): a client that keeps its connection to
// the bridge open across a retirement, or across the install of a newer
// generation, gets every further request on that same connection refused:
// admission is per request, never per connection.
func TestNoRequestsAcrossAnEpoch(t *testing.T) {
	raw, signer, id := admittedRaw(t)
	ok := withCapability(t, raw, signer, id, capability.OpExec)
	var reused []bool
	get := func() (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://bridge/envs", nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { reused = append(reused, info.Reused) },
		}))
		resp, err := ok.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != http.StatusOK {
		t.Fatalf("before: HTTP %d %s", code, body)
	}
	if code, _ := get(); code != http.StatusOK {
		t.Fatalf("before, again: HTTP %d", code)
	}
	// A newer generation is installed (a restart of the execution in
	// place): the open connection's next request carries generation 3.
	newer := id
	newer.Generation, newer.Activation = 4, "a-2"
	body, _ := json.Marshal(InitRequest{SandboxID: newer.Sandbox, Generation: newer.Generation, ActivationID: newer.Activation, Node: newer.Node, Substrate: newer.Substrate, Hostname: "sb1"})
	resp, err := raw.Post("http://bridge/bridge/v1/init", "application/json", bytes.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("init generation 4: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, body := get(); code != http.StatusConflict || !refusedWith(body, errdefs.ErrRefreshRoute) {
		t.Errorf("generation 3 after generation 4 was installed: HTTP %d %s, want 409 refresh_route", code, body)
	}
	// Retired: even the current generation's capability is refused on
	// the open connection.
	cur := withCapability(t, raw, signer, newer, capability.OpExec)
	resp, err = raw.Post("http://bridge/bridge/v1/retire", "application/json", nil)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("retire: %v %v", resp, err)
	}
	resp.Body.Close()
	ok = cur
	if code, body := get(); code != http.StatusConflict || !strings.Contains(body, "retired") {
		t.Errorf("after retirement: HTTP %d %s, want 409 retired", code, body)
	}
	for i, r := range reused[1:] {
		if !r {
			t.Errorf("request %d did not reuse the open connection: the test proves nothing about it", i+2)
		}
	}
}

// admittedRaw is admitted with the raw client's transport kept (one
// connection, reused).
func admittedRaw(t *testing.T) (*http.Client, *capability.Signer, capability.Identity) {
	raw, _, _ := startBridge(t)
	_, signer, id := admitted(t, raw)
	return raw, signer, id
}
