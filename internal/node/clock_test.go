package node

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/privop"
)

// fakeClock is a node's clocks for a test: set moves the wall and the
// monotonic clock together, jump moves the wall clock alone.
type fakeClock struct {
	mu sync.Mutex
	r  clockReading
}

func (c *fakeClock) read() clockReading {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.r
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.r.wall, c.r.mono = c.r.wall.Add(d), c.r.mono+d
}

func (c *fakeClock) jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.r.wall = c.r.wall.Add(d)
}

// TestClockMeasure: offset = T - (sent + rtt/2), error rtt/2 counted
// against the node, unusable answers ignored.
func TestClockMeasure(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(wall time.Duration, mono time.Duration) clockReading {
		return clockReading{wall: t0.Add(wall), mono: time.Hour + mono}
	}
	for _, tc := range []struct {
		name           string
		sent, received clockReading
		server         time.Time
		used, agreed   bool
		offset, bound  time.Duration
	}{
		{"in step", at(0, 0), at(0, 0), t0, true, true, 0, 0},
		{"control plane 15 s ahead", at(0, 0), at(0, 0), t0.Add(15 * time.Second), true, true, 15 * time.Second, 0},
		{"control plane 16 s ahead", at(0, 0), at(0, 0), t0.Add(16 * time.Second), true, false, 16 * time.Second, 0},
		{"node 16 s ahead", at(0, 0), at(0, 0), t0.Add(-16 * time.Second), true, false, -16 * time.Second, 0},
		{"node an hour behind", at(0, 0), at(0, 0), t0.Add(time.Hour), true, false, time.Hour, 0},
		{"the midpoint of the round trip", at(0, 0), at(2*time.Second, 2*time.Second), t0.Add(time.Second), true, true, 0, time.Second},
		{"the error counts against the node", at(0, 0), at(4*time.Second, 4*time.Second), t0.Add(2*time.Second + 14*time.Second), true, false, 14 * time.Second, 2 * time.Second},
		// The wall clock was set during the round trip: rtt is monotonic.
		{"rtt is monotonic", at(0, 0), at(time.Hour, time.Second), t0.Add(500 * time.Millisecond), true, true, 0, 500 * time.Millisecond},
		{"round trip too long", at(0, 0), at(6*time.Second, 6*time.Second), t0.Add(time.Hour), false, false, 0, 0},
		{"no control plane time", at(0, 0), at(0, 0), time.Time{}, false, false, 0, 0},
		{"monotonic clock went back", at(0, time.Second), at(0, 0), t0, false, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c clockAgreement
			if used := c.observe(tc.sent, tc.received, tc.server); used != tc.used {
				t.Fatalf("observe used the measure: %v, want %v", used, tc.used)
			}
			v := c.verdict(tc.received)
			if v.measured != tc.used || v.agreed != tc.agreed || v.offset != tc.offset || v.bound != tc.bound {
				t.Fatalf("verdict %+v, want measured %v agreed %v offset %s bound %s", v, tc.used, tc.agreed, tc.offset, tc.bound)
			}
			if (v.err() == nil) != tc.agreed {
				t.Fatalf("err() = %v with agreed %v", v.err(), tc.agreed)
			}
		})
	}
}

// clockTestNode is a node with keys, one execution record and a fake clock
// that agrees with the control plane's.
func clockTestNode(t *testing.T, log io.Writer) (*Manager, *fakeClock, *capability.Signer, *Record) {
	t.Helper()
	m, err := NewManager(Config{NodeID: "node-a", DataDir: t.TempDir(), Privileged: privop.NewClient("/nonexistent"), HostBridge: "/bin/true", Token: "node-token"},
		slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{r: clockReading{wall: time.Now().Truncate(time.Second), mono: time.Hour}}
	m.clockSource = clk.read
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := capability.NewSigner("k1", priv)
	if err := m.SetKeys(capability.KeySetFor(1, signer)); err != nil {
		t.Fatal(err)
	}
	rec := &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g8-x", SandboxID: "sb1", Generation: 8, ActivationID: "a-1", Runtime: "ns"}}
	if err := os.MkdirAll(m.records.execDir(rec.ExecID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := m.records.save(rec); err != nil {
		t.Fatal(err)
	}
	return m, clk, signer, rec
}

var clockTestID = capability.Identity{Sandbox: "sb1", Generation: 8, Node: "node-a", Substrate: "ns", Activation: "a-1"}

// TestNodeRefusesCapabilitiesWhileItsClockDisagrees (E-12): before the first
// measure, while the control plane's clock is more than the skew away, and
// after a jump of the wall clock between heartbeats, every capability is
// refused with the clock refusal (503 clock_disagrees, counted, logged once
// per change); a measure that agrees accepts again.
func TestNodeRefusesCapabilitiesWhileItsClockDisagrees(t *testing.T) {
	logs := &syncBuffer{}
	m, clk, signer, rec := clockTestNode(t, logs)
	mint := func() string {
		tok, err := signer.WithClock(func() time.Time { return clk.read().wall }).Mint(clockTestID, capability.OpExec, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		return capability.Encode(tok)
	}
	check := func() error { return m.checkCapability(mint(), rec, capability.OpExec, m.now()) }
	heartbeat := func(server time.Duration) {
		r := clk.read()
		m.measureClock(r, r, r.wall.Add(server))
	}
	wantClock := func(when, text string) {
		t.Helper()
		before := m.refusals.capability.Value(refusedClock)
		err := check()
		if !errors.Is(err, errClock) || !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("%s: %v, want the clock refusal", when, err)
		}
		if status, code := StatusOf(err); status != http.StatusServiceUnavailable || code != "clock_disagrees" {
			t.Errorf("%s: HTTP %d %s, want 503 clock_disagrees", when, status, code)
		}
		if !strings.Contains(err.Error(), text) {
			t.Errorf("%s: %q does not say %q", when, err, text)
		}
		if got := m.refusals.capability.Value(refusedClock); got != before+1 {
			t.Errorf("%s: clock refusals %d, want %d", when, got, before+1)
		}
	}
	wantOK := func(when string) {
		t.Helper()
		if err := check(); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}

	wantClock("before the first heartbeat", "has not yet measured its clock")
	heartbeat(0)
	wantOK("in agreement")
	heartbeat(time.Hour)
	wantClock("control plane an hour ahead", "node clock differs from the control plane's by -3600.0s")
	wantClock("again", "capabilities refused until it agrees")
	heartbeat(16 * time.Second)
	wantClock("16 s", "by -16.0s")
	heartbeat(-15 * time.Second)
	wantOK("node 15 s ahead")
	heartbeat(0)
	wantOK("back in agreement")

	// A jump of the wall clock is caught at once, not at the next
	// heartbeat; the next heartbeat measures the new offset.
	clk.advance(time.Second)
	wantOK("a second later")
	clk.jump(-time.Hour)
	wantClock("wall clock set back an hour", "by -3600.0s")
	clk.jump(time.Hour)
	wantOK("wall clock set right again")
	clk.jump(20 * time.Second)
	wantClock("wall clock set 20 s ahead", "by +20.0s")
	heartbeat(-20 * time.Second)
	wantClock("a heartbeat confirms it", "by +20.0s")
	heartbeat(0)
	wantOK("NTP fixed it")

	// The state is exposed, and logged once per change of state.
	clk.jump(time.Hour)
	var b strings.Builder
	m.writeClockMetrics(&b)
	for _, want := range []string{"space_node_clock_offset_seconds 3600\n", "space_node_clock_agreed 0\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
	wantClock("jumped again", "by +3600.0s")
	for range 20 {
		_ = check()
	}
	if n := strings.Count(logs.String(), `msg="node clock differs from the control plane's`); n != 4 {
		t.Errorf("logged %d disagreements, want 4 (one per change of state):\n%s", n, logs.String())
	}
	heartbeat(-time.Hour)
	clk.jump(-time.Hour)
	heartbeat(0)
	b.Reset()
	m.writeClockMetrics(&b)
	if !strings.Contains(b.String(), "space_node_clock_agreed 1\n") {
		t.Errorf("metrics after agreement:\n%s", b.String())
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
	for _, want := range []string{`space_node_capability_refusals_total{reason="clock"}`, "space_node_clock_offset_seconds", "space_node_clock_agreed 1"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("GET /node/v1/metrics lacks %q", want)
		}
	}
}

// TestNodeWindowBoundaries (E-1, E-2): the node-api's check and the
// ServicePort ingress accept a capability from iat-15 s to exp+15 s by the
// node's clock and refuse it at iat-16 s and exp+16 s.
func TestNodeWindowBoundaries(t *testing.T) {
	m, clk, signer, rec := clockTestNode(t, io.Discard)
	iat := clk.read().wall
	fixed := signer.WithClock(func() time.Time { return iat })
	tokFor := func(ops capability.Op, port uint16, proto string) string {
		tok, err := fixed.Mint(clockTestID, ops, port, proto)
		if err != nil {
			t.Fatal(err)
		}
		return capability.Encode(tok)
	}
	exec, port := tokFor(capability.OpExec, 0, ""), tokFor(capability.OpServicePort, 8080, "http")
	api := httptest.NewServer(m.Handler())
	defer api.Close()
	ingress := func(tok string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, api.URL+"/node/v1/executions/sb1-g8-x/ports/8080/", nil)
		req.Header.Set(TokenHeader, "node-token")
		req.Header.Set(capability.Header, tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	exp := iat.Add(capability.Lifetime)
	for _, tc := range []struct {
		name string
		at   time.Time
		want error
	}{
		{"iat-1h", iat.Add(-time.Hour), capability.ErrNotYetValid},
		{"iat-16s", iat.Add(-16 * time.Second), capability.ErrNotYetValid},
		{"iat-15s", iat.Add(-15 * time.Second), nil},
		{"exp+15s", exp.Add(15 * time.Second), nil},
		{"exp+16s", exp.Add(16 * time.Second), capability.ErrExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The node's clock reads tc.at and agrees with the control
			// plane's: the window alone decides.
			clk.mu.Lock()
			clk.r = clockReading{wall: tc.at, mono: clk.r.mono + time.Second}
			clk.mu.Unlock()
			r := clk.read()
			m.measureClock(r, r, r.wall)
			err := m.checkCapability(exec, rec, capability.OpExec, m.now())
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, errdefs.ErrPermissionDenied) {
				t.Fatalf("node-api at %s: %v, want %v", tc.name, err, tc.want)
			}
			if tc.want != nil && !strings.Contains(err.Error(), tc.want.Error()) {
				t.Errorf("node-api at %s: %v, want %v", tc.name, err, tc.want)
			}
			// Past the capability check the execution has no gateway
			// here: that is the admitted answer of this test.
			want, text := http.StatusConflict, "has no network on this node"
			if tc.want != nil {
				want, text = http.StatusForbidden, tc.want.Error()
			}
			if got, body := ingress(port); got != want || !strings.Contains(body, text) {
				t.Errorf("ServicePort ingress at %s: HTTP %d %s, want %d %q", tc.name, got, body, want, text)
			}
		})
	}
	if m.refusals.capability.Value(refusedNotYetValid) == 0 {
		t.Error("no refusal counted as not yet valid")
	}
}

// TestServicePortRefusesOtherPurposes (E-10): an exec, files or lifecycle
// capability for the very execution is refused at the ServicePort ingress,
// and a ServicePort capability at the guest API.
func TestServicePortRefusesOtherPurposes(t *testing.T) {
	m, clk, signer, rec := clockTestNode(t, io.Discard)
	agreeClock(t, m)
	s := signer.WithClock(func() time.Time { return clk.read().wall })
	api := httptest.NewServer(m.Handler())
	defer api.Close()
	for _, ops := range []capability.Op{capability.OpExec, capability.OpFiles, capability.OpLifecycle, capability.OpExec | capability.OpFiles | capability.OpLifecycle} {
		tok, err := s.Mint(clockTestID, ops, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/node/v1/executions/sb1-g8-x/ports/8080/", "/node/v1/executions/sb1-g8-x/tcp/8080"} {
			req, _ := http.NewRequest(http.MethodGet, api.URL+path, nil)
			req.Header.Set(TokenHeader, "node-token")
			req.Header.Set(capability.Header, capability.Encode(tok))
			if strings.Contains(path, "/tcp/") {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", TCPUpgrade)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "does not allow this operation") {
				t.Errorf("%s capability at %s: HTTP %d %s, want 403", opsString(ops), path, resp.StatusCode, body)
			}
		}
	}
	sp, _ := s.Mint(clockTestID, capability.OpServicePort, 8080, "http")
	for _, op := range []capability.Op{capability.OpExec, capability.OpFiles, capability.OpLifecycle} {
		if err := m.checkCapability(capability.Encode(sp), rec, op, m.now()); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("ServicePort capability for %s: %v, want permission denied", opsString(op), err)
		}
	}
}

// TestFirstRequestWaitsForTheFirstMeasure: on a node whose heartbeat loop
// runs, a request that arrives before the first answer waits for it (and is
// then judged by it) rather than failing at once; with no answer it is
// refused, never admitted.
func TestFirstRequestWaitsForTheFirstMeasure(t *testing.T) {
	m, clk, signer, rec := clockTestNode(t, io.Discard)
	tok, _ := signer.WithClock(func() time.Time { return clk.read().wall }).Mint(clockTestID, capability.OpExec, 0, "")
	header := capability.Encode(tok)
	m.clock.startHeartbeats()
	done := make(chan error, 1)
	go func() { done <- m.checkCapability(header, rec, capability.OpExec, m.now()) }()
	select {
	case err := <-done:
		t.Fatalf("answered before any measure: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	r := clk.read()
	m.measureClock(r, r, r.wall)
	if err := <-done; err != nil {
		t.Fatalf("after the first measure: %v", err)
	}

	// No answer at all: refused once the wait is over.
	m2, _, _, rec2 := clockTestNode(t, io.Discard)
	m2.clock.startHeartbeats()
	if err := m2.checkCapability(header, rec2, capability.OpExec, m2.now()); !errors.Is(err, errClock) {
		t.Fatalf("with no heartbeat answered: %v, want the clock refusal", err)
	}
}
