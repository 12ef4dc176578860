package node

import (
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/privop"
)

// TestCapabilityRefusalsCountedAndLogged: every way checkCapability refuses
// is counted under its reason, exposed on GET /node/v1/metrics, and logged
// with the capability's identity and the installed one.
func TestCapabilityRefusalsCountedAndLogged(t *testing.T) {
	logs := &syncBuffer{}
	m, err := NewManager(Config{NodeID: "node-a", DataDir: t.TempDir(), Privileged: privop.NewClient("/nonexistent"), HostBridge: "/bin/true", Token: "tok"},
		slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	agreeClock(t, m)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := capability.NewSigner("k1", priv)
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	otherSigner, _ := capability.NewSigner("k1", otherPriv)
	rec := &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g8-x", SandboxID: "sb1", Generation: 8, ActivationID: "a-1", Runtime: "vm"}}
	id := capability.Identity{Sandbox: "sb1", Generation: 8, Node: "node-a", Substrate: "vm", Activation: "a-1"}
	mint := func(s *capability.Signer, id capability.Identity, op capability.Op, port uint16, proto string) string {
		tok, err := s.Mint(id, op, port, proto)
		if err != nil {
			t.Fatal(err)
		}
		return capability.Encode(tok)
	}
	now := time.Now()
	scrape := func() map[string]uint64 {
		rr := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/node/v1/metrics", nil)
		req.Header.Set(TokenHeader, "tok")
		m.Handler().ServeHTTP(rr, req)
		if rr.Code != http.StatusOK || !strings.HasPrefix(rr.Header().Get("Content-Type"), "text/plain") {
			t.Fatalf("GET /node/v1/metrics: HTTP %d %s", rr.Code, rr.Header().Get("Content-Type"))
		}
		return parseCounters(t, rr.Body.String(), "space_node_capability_refusals_total", "reason")
	}
	start := scrape()
	for _, r := range capabilityReasons {
		if _, ok := start[r]; !ok {
			t.Errorf("reason %s not exposed before it happened", r)
		}
	}

	// Before the node has keys.
	_ = m.checkCapability(mint(signer, id, capability.OpExec, 0, ""), rec, capability.OpExec, now)
	if err := m.SetKeys(capability.KeySetFor(1, signer)); err != nil {
		t.Fatal(err)
	}
	other, older := id, id
	other.Sandbox = "sb2"
	older.Generation = 7
	cases := []struct {
		reason string
		header string
		op     capability.Op
		now    time.Time
	}{
		{refusedMissing, "", capability.OpExec, now},
		{refusedSignature, "!!!", capability.OpExec, now},
		{refusedSignature, mint(otherSigner, id, capability.OpExec, 0, ""), capability.OpExec, now},
		{refusedExpired, mint(signer, id, capability.OpExec, 0, ""), capability.OpExec, now.Add(capability.Lifetime + capability.Skew + time.Second)},
		{refusedSandbox, mint(signer, other, capability.OpExec, 0, ""), capability.OpExec, now},
		{refusedOp, mint(signer, id, capability.OpExec, 0, ""), capability.OpFiles, now},
		{refusedRefreshRoute, mint(signer, older, capability.OpExec, 0, ""), capability.OpExec, now},
	}
	for _, tc := range cases {
		if err := m.checkCapability(tc.header, rec, tc.op, tc.now); err == nil {
			t.Errorf("%s: allowed", tc.reason)
		}
	}
	if err := m.checkCapability(mint(signer, id, capability.OpExec, 0, ""), rec, capability.OpExec, now); err != nil {
		t.Fatalf("this execution's capability: %v", err)
	}

	want := map[string]uint64{refusedNoKeys: 1}
	for _, tc := range cases {
		want[tc.reason]++
	}
	end := scrape()
	for _, r := range capabilityReasons {
		if got := end[r] - start[r]; got != want[r] {
			t.Errorf("%s: counted %d, want %d", r, got, want[r])
		}
	}

	line := logLine(logs.String(), "reason=deny-sandbox")
	for _, w := range []string{
		"capability.sandbox=sb2", "capability.generation=8", "capability.node=node-a", "capability.substrate=vm",
		"capability.activation=a-1", "capability.ops=exec",
		"installed.sandbox=sb1", "installed.generation=8", "installed.node=node-a", "installed.substrate=vm", "installed.activation=a-1",
		"exec=sb1-g8-x",
	} {
		if !strings.Contains(line, w) {
			t.Errorf("denial log %q lacks %q", line, w)
		}
	}
	if line := logLine(logs.String(), "reason=refresh-route"); !strings.Contains(line, "capability.generation=7") || !strings.Contains(line, "installed.generation=8") {
		t.Errorf("refresh-route log %q lacks both generations", line)
	}
}

// TestDenyReasonAgreesWithCompare keeps denyReason in step with
// capability.Compare: whenever Compare denies, denyReason names the case.
func TestDenyReasonAgreesWithCompare(t *testing.T) {
	installed := capability.Identity{Sandbox: "sb1", Generation: 8, Node: "n", Substrate: "vm", Activation: "a"}
	other := installed
	other.Sandbox = "sb2"
	tests := []struct {
		name string
		c    capability.Capability
		req  capability.Request
		want string
	}{
		{"other sandbox", capability.Capability{Identity: other, Ops: capability.OpExec}, capability.Request{Op: capability.OpExec}, refusedSandbox},
		{"other sandbox and op", capability.Capability{Identity: other, Ops: capability.OpExec}, capability.Request{Op: capability.OpFiles}, refusedSandbox},
		{"op", capability.Capability{Identity: installed, Ops: capability.OpExec}, capability.Request{Op: capability.OpFiles}, refusedOp},
		{"no op", capability.Capability{Identity: installed, Ops: capability.OpExec}, capability.Request{}, refusedOp},
		{"port", capability.Capability{Identity: installed, Ops: capability.OpServicePort, Port: 80, Protocol: "http"}, capability.Request{Op: capability.OpServicePort, Port: 81, Protocol: "http"}, refusedPort},
		{"protocol", capability.Capability{Identity: installed, Ops: capability.OpServicePort, Port: 80, Protocol: "http"}, capability.Request{Op: capability.OpServicePort, Port: 80, Protocol: "tcp"}, refusedPort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d, _ := capability.Compare(&tt.c, installed, tt.req); d != capability.Deny {
				t.Fatalf("Compare = %s, want deny", d)
			}
			if got := denyReason(&tt.c, installed, tt.req); got != tt.want {
				t.Errorf("denyReason = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestOpsString(t *testing.T) {
	for ops, want := range map[capability.Op]string{
		capability.OpExec: "exec",
		capability.OpExec | capability.OpFiles | capability.OpLifecycle | capability.OpServicePort: "exec,files,lifecycle,service-port",
		capability.OpFiles | 1<<10: "files,0x400",
		0:                          "",
	} {
		if got := opsString(ops); got != want {
			t.Errorf("opsString(%#x) = %q, want %q", uint32(ops), got, want)
		}
	}
}

// TestMetricsExposition checks the text format line by line: HELP and TYPE
// before the samples, every label value quoted, counts as integers.
func TestMetricsExposition(t *testing.T) {
	r := newRefusalMetrics()
	for range 3 {
		r.capability.Inc(refusedOp)
	}
	r.capability.Inc("deny-other")
	r.bridgePeer.Inc(peerCheckExe)
	r.bridgePeer.Inc(peerCheckExe)
	var b strings.Builder
	r.write(&b)
	sample := regexp.MustCompile(`^(space_node_[a-z_]+)\{(reason|check|surface)="([a-z_-]+)"\} ([0-9]+)$`)
	typed := map[string]bool{}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if rest, ok := strings.CutPrefix(l, "# TYPE "); ok {
			name, kind, _ := strings.Cut(rest, " ")
			if kind != "counter" {
				t.Errorf("%s is a %s", name, kind)
			}
			typed[name] = true
			continue
		}
		if strings.HasPrefix(l, "# HELP ") {
			continue
		}
		mm := sample.FindStringSubmatch(l)
		if mm == nil {
			t.Fatalf("not a sample line: %q", l)
		}
		if !typed[mm[1]] {
			t.Errorf("%s sampled before its TYPE", mm[1])
		}
		got[mm[1]+"/"+mm[3]] = mm[4]
	}
	for k, v := range map[string]string{
		"space_node_capability_refusals_total/deny-op":      "3",
		"space_node_capability_refusals_total/deny-other":   "1",
		"space_node_capability_refusals_total/missing":      "0",
		"space_node_bridge_peer_refusals_total/exe":         "2",
		"space_node_bridge_peer_refusals_total/pid":         "0",
		"space_node_bridge_peer_refusals_total/start-time":  "0",
		"space_node_capability_refusals_total/deny-expired": "0",
	} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

// parseCounters reads the samples of one counter from an exposition.
func parseCounters(t *testing.T, text, name, label string) map[string]uint64 {
	t.Helper()
	re := regexp.MustCompile("(?m)^" + name + `\{` + label + `="([^"]+)"\} ([0-9]+)$`)
	out := map[string]uint64{}
	for _, mm := range re.FindAllStringSubmatch(text, -1) {
		n, err := strconv.ParseUint(mm[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		out[mm[1]] = n
	}
	if len(out) == 0 {
		t.Fatalf("no %s samples in %q", name, text)
	}
	return out
}

func BenchmarkCapabilityRefusedLog(b *testing.B) {
	m := &Manager{cfg: Config{NodeID: "node-a"}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), refusals: newRefusalMetrics()}
	rec := &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g8-x", SandboxID: "sb1", Generation: 8, ActivationID: "a-1", Runtime: "vm"}}
	c := &capability.Capability{Identity: capability.Identity{Sandbox: "sb2", Generation: 8, Node: "node-a", Substrate: "vm", Activation: "a-1"}, Ops: capability.OpExec}
	for b.Loop() {
		m.capabilityRefused(rec, c, refusedSandbox, "capability is for another sandbox")
	}
}

// TestExtraMetricsAreExposed: what Config.ExtraMetrics writes (space
// server --dev: its node-manager's restarts) is on GET /node/v1/metrics,
// behind the node token like the rest.
func TestExtraMetricsAreExposed(t *testing.T) {
	const family = "space_node_manager_restarts_total{ended=\"signal\"} 2\n"
	m, err := NewManager(Config{NodeID: "node-a", DataDir: t.TempDir(), Privileged: privop.NewClient("/nonexistent"), HostBridge: "/bin/true", Token: "node-token",
		ExtraMetrics: func(w io.Writer) { io.WriteString(w, family) }},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(m.Handler())
	defer api.Close()
	req, _ := http.NewRequest(http.MethodGet, api.URL+"/node/v1/metrics", nil)
	req.Header.Set(TokenHeader, "node-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), family) {
		t.Errorf("GET /node/v1/metrics: HTTP %d, want the extra family %q in:\n%s", resp.StatusCode, family, body)
	}
}
