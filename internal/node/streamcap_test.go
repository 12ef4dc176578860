package node

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/privop"
)

// TestStreamCapPerExecution: the node forwards at most
// MaxStreamsPerExecution requests to one execution at once. With that many
// held open by the guest, the next one is refused 429 too_many_streams and
// counted in space_node_streams_refused_total; another execution is still
// served; and a request that ends frees its slot.
func TestStreamCapPerExecution(t *testing.T) {
	const max = 4
	m, err := NewManager(Config{NodeID: "node-a", DataDir: t.TempDir(), Privileged: privop.NewClient("/nonexistent"), HostBridge: "/bin/true",
		Token: "node-token", Gateway: &GatewayConfig{Dialer: refuseDialer{}, Upstream: noResolver{}}, MaxStreamsPerExecution: max},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	agreeClock(t, m)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := capability.NewSigner("k1", priv)
	if err := m.SetKeys(capability.KeySetFor(1, signer)); err != nil {
		t.Fatal(err)
	}
	// Each execution's guest app holds a request until told to answer.
	arrived := make(chan string, 64)
	answer := make(chan struct{})
	ids := map[string]capability.Identity{}
	for _, sb := range []string{"sb1", "sb2"} {
		rec := &Record{StartExecution: nodev1.StartExecution{ExecID: sb + "-g1-x", SandboxID: sb, Generation: 1, ActivationID: "a-" + sb, Runtime: "ns", Egress: []byte(`{"allow_internet": false}`)}}
		guest := attachTestExecution(t, m, rec)
		ln, err := guest.Listen(8080)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived <- sb
			if r.URL.Path == "/hold" {
				<-answer
			}
			fmt.Fprint(w, "ok")
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		ids[sb] = capability.Identity{Sandbox: sb, Generation: 1, Node: "node-a", Substrate: "ns", Activation: "a-" + sb}
	}
	api := httptest.NewServer(m.Handler())
	t.Cleanup(api.Close)
	// Closed before the servers: every held request ends first.
	t.Cleanup(func() { close(answer) })

	type result struct {
		code int
		body string
	}
	get := func(sb, path string) result {
		tok, err := signer.Mint(ids[sb], capability.OpServicePort, 8080, "http")
		if err != nil {
			t.Error(err)
			return result{}
		}
		req, _ := http.NewRequest(http.MethodGet, api.URL+"/node/v1/executions/"+sb+"-g1-x/ports/8080"+path, nil)
		req.Header.Set(TokenHeader, "node-token")
		req.Header.Set(capability.Header, capability.Encode(tok))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return result{}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return result{resp.StatusCode, string(b)}
	}
	held := make(chan result, max+1)
	for range max {
		go func() { held <- get("sb1", "/hold") }()
	}
	for range max {
		if sb := <-arrived; sb != "sb1" {
			t.Fatalf("a held request reached %s", sb)
		}
	}
	// The cap is full: the next request to sb1 is refused before the guest.
	over := make(chan result, 1)
	go func() { over <- get("sb1", "/hold") }()
	var r result
	select {
	case r = <-over:
	case sb := <-arrived:
		t.Fatalf("the request over the cap of %d reached %s's guest", max, sb)
	}
	var e nodev1.Error
	_ = json.Unmarshal([]byte(r.body), &e)
	if r.code != http.StatusTooManyRequests || e.Reason != "too_many_streams" {
		t.Fatalf("request over the cap: HTTP %d %q, want 429 too_many_streams", r.code, r.body)
	}
	select {
	case sb := <-arrived:
		t.Fatalf("the refused request reached %s's guest", sb)
	default:
	}
	if got := m.refusals.streams.Value(surfacePortHTTP); got != 1 {
		t.Errorf("space_node_streams_refused_total{surface=port_http} = %d, want 1", got)
	}
	mr := httptest.NewRecorder()
	mreq := httptest.NewRequest(http.MethodGet, "/node/v1/metrics", nil)
	m.handleMetrics(mr, mreq)
	if want := `space_node_streams_refused_total{surface="port_http"} 1`; !strings.Contains(mr.Body.String(), want+"\n") {
		t.Errorf("node metrics have no %s:\n%s", want, mr.Body.String())
	}
	// Another execution is served meanwhile.
	if r := get("sb2", "/"); r.code != http.StatusOK || r.body != "ok" {
		t.Fatalf("other execution while sb1 is at its cap: HTTP %d %q", r.code, r.body)
	}
	<-arrived
	// One held request ends: its slot is free again.
	answer <- struct{}{}
	if r := <-held; r.code != http.StatusOK {
		t.Fatalf("held request: HTTP %d %q", r.code, r.body)
	}
	waitFor(t, "the ended request's slot freed", func() bool { return m.streams.count("sb1-g1-x") == max-1 })
	if r := get("sb1", "/"); r.code != http.StatusOK || r.body != "ok" {
		t.Fatalf("after a slot was freed: HTTP %d %q", r.code, r.body)
	}
}
