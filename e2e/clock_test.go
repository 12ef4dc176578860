package e2e

import (
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/node"
)

// TestNodeClockDisagreement (catalogue E-2, E-12): a real node whose wall
// clock is set an hour back (the test-only offset file: the system clock of
// a shared machine cannot be set) refuses every capability with the clock
// refusal — at its node-api, through the control plane, and at the host
// bridge it runs — even one that is inside its window by the node's own
// clock, exposes it in its metrics, and accepts again once its clock agrees.
// A capability issued an hour ahead is refused by the node and by the
// bridge as not yet valid.
func TestNodeClockDisagreement(t *testing.T) {
	dir := newDataDir(t)
	offsetFile := filepath.Join(dir, "test-clock-offset")
	setOffset := func(d string) {
		if err := os.WriteFile(offsetFile, []byte(d+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	setOffset("0s")
	in := startServerEnv(t, dir, []string{node.TestClockOffsetEnv + "=" + offsetFile})
	defer in.stop()
	sb := in.create("minimal")
	defer in.delete(sb.ID)
	if res := in.exec(sb.ID, "echo", "before"); res.Stdout != "before\n" {
		t.Fatalf("exec before: %+v", res)
	}
	rec := nodeRecord(t, dir, sb.ID, sb.Generation)
	local := &secondNode{t: t, in: in, dir: dir}
	keyring, err := capability.OpenKeyring(filepath.Join(dir, "signing-keys.json"), "")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := keyring.Signer()
	if err != nil {
		t.Fatal(err)
	}
	mintAt := func(at time.Time) string {
		tok, err := signer.WithClock(func() time.Time { return at }).Mint(capability.Identity{
			Sandbox: sb.ID, Generation: sb.Generation, Node: sb.Node, Substrate: sb.Runtime, Activation: rec.ActivationID,
		}, capability.OpExec, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		return capability.Encode(tok)
	}
	bridgeHealth := func(tok string) (int, string) {
		return bridgeGet(t, filepath.Join(dir, "node", "execs", rec.ExecID, "bridge.sock"), "/health", tok)
	}

	// GET /health answers 204.
	if code, body := local.guestHealth(rec.ExecID, mintAt(time.Now())); code != http.StatusNoContent {
		t.Fatalf("a fresh capability at the node: HTTP %d %s", code, body)
	}
	future := mintAt(time.Now().Add(time.Hour))
	if code, body := local.guestHealth(rec.ExecID, future); code != http.StatusForbidden || !strings.Contains(body, "not yet valid") {
		t.Errorf("a capability issued an hour ahead at the node: HTTP %d %s, want 403 not yet valid", code, body)
	}
	if code, body := bridgeHealth(future); code != http.StatusForbidden || !strings.Contains(body, "not yet valid") {
		t.Errorf("a capability issued an hour ahead at the bridge: HTTP %d %s, want 403 not yet valid", code, body)
	}

	// The node's wall clock goes back an hour. A capability issued at
	// the node's time would be inside its window by the node's clock.
	setOffset("-1h")
	nodeTime := mintAt(time.Now().Add(-time.Hour))
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := local.guestHealth(rec.ExecID, nodeTime)
		if code == http.StatusServiceUnavailable && strings.Contains(body, "clock_disagrees") {
			if !strings.Contains(body, "node clock differs from the control plane's by -3600") {
				t.Errorf("the refusal does not say by how much: %s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with the clock an hour back the node still answers HTTP %d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, tok := range []string{mintAt(time.Now()), future} {
		if code, body := local.guestHealth(rec.ExecID, tok); code != http.StatusServiceUnavailable || !strings.Contains(body, "clock_disagrees") {
			t.Errorf("while the clock disagrees: HTTP %d %s, want 503 clock_disagrees", code, body)
		}
	}
	// The bridge was told: it refuses too, even a token the node would
	// have let through by its own clock.
	deadline = time.Now().Add(10 * time.Second)
	for {
		code, body := bridgeHealth(nodeTime)
		if code == http.StatusServiceUnavailable && strings.Contains(body, "clock_disagrees") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host bridge, while its node's clock disagrees: HTTP %d %s, want 503 clock_disagrees", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Through the control plane, the user sees why.
	var res map[string]any
	if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"true"}}, &res); code == http.StatusOK {
		t.Errorf("exec while the node's clock disagrees: HTTP %d %v", code, res)
	} else if code != http.StatusServiceUnavailable || !strings.Contains(strings.Join(flatten(res), " "), "node clock differs from the control plane's") {
		t.Errorf("exec while the node's clock disagrees: HTTP %d %v, want 503 with the node's reason", code, res)
	}
	_, metrics := local.nodeAPI("GET", "/node/v1/metrics", "")
	for _, want := range []string{"space_node_clock_agreed 0", `space_node_capability_refusals_total{reason="clock"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	}
	// The offset is measured: an hour back, within the measure's own error
	// bound (half a heartbeat's round trip) and a second of slack.
	offset, errBound := gauge(t, metrics, "space_node_clock_offset_seconds"), gauge(t, metrics, "space_node_clock_offset_error_seconds")
	if math.Abs(offset+3600) > errBound+1 {
		t.Errorf("space_node_clock_offset_seconds = %v (error bound %v), want -3600", offset, errBound)
	}
	if strings.Contains(metrics, `space_node_capability_refusals_total{reason="clock"} 0`) {
		t.Error("no clock refusal counted")
	}
	if !strings.Contains(in.logs(), "node clock differs from the control plane's") {
		t.Error("the disagreement was not logged")
	}

	// The clock is set right: accepted again.
	setOffset("0s")
	deadline = time.Now().Add(30 * time.Second)
	for {
		code, body := local.guestHealth(rec.ExecID, mintAt(time.Now()))
		if code == http.StatusNoContent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with the clock right again the node answers HTTP %d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		var r execResult
		code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"echo", "after"}}, &r)
		if code == http.StatusOK && r.Stdout == "after\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exec with the clock right again: HTTP %d %+v", code, r)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body := bridgeHealth(mintAt(time.Now())); code != http.StatusNoContent {
		t.Errorf("the host bridge with the clock right again: HTTP %d %s", code, body)
	}
}

// bridgeGet sends GET path with a capability straight to a host bridge's
// socket, as a node would forward it.
func bridgeGet(t *testing.T, socket, path, tok string) (int, string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}, Timeout: 10 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, "http://bridge"+path, nil)
	req.Header.Set(capability.Header, tok)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// flatten lists the string values of a decoded JSON object.
func flatten(m map[string]any) []string {
	var out []string
	for _, v := range m {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case map[string]any:
			out = append(out, flatten(v)...)
		}
	}
	return out
}

// gauge reads the value of the unlabelled metric name from a Prometheus
// exposition.
func gauge(t *testing.T, metrics, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("metrics lack %s:\n%s", name, metrics)
	return 0
}
