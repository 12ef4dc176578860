package bridge

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
)

// testAdmission is a bridge's admission with keys, an identity, and clocks
// the test moves: wall and monotonic together (advance) or the wall alone.
type testAdmission struct {
	admission
	signer *capability.Signer
	wall   time.Time
	mono   time.Duration
}

var clockTestID = capability.Identity{Sandbox: "sb1", Generation: 3, Node: "n1", Substrate: "ns", Activation: "a-1"}

func newTestAdmission(t *testing.T) *testAdmission {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := capability.NewSigner("k1", priv)
	a := &testAdmission{signer: signer, wall: time.Unix(1_800_000_000, 0), mono: time.Hour}
	a.now = func() time.Time { return a.wall }
	a.clocks = func() (time.Time, time.Duration) { return a.wall, a.mono }
	a.setKeys(capability.KeySetFor(1, signer))
	a.install(clockTestID)
	return a
}

// mintAt mints an exec capability issued at iat.
func (a *testAdmission) mintAt(t *testing.T, iat time.Time) string {
	t.Helper()
	tok, err := a.signer.WithClock(func() time.Time { return iat }).Mint(clockTestID, capability.OpExec, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	return capability.Encode(tok)
}

// TestBridgeWindowBoundaries (E-1, E-2): the bridge accepts a capability from
// iat-15 s to exp+15 s by its clock and refuses it at iat-16 s and exp+16 s.
func TestBridgeWindowBoundaries(t *testing.T) {
	a := newTestAdmission(t)
	a.setClock(ClockRequest{Agreed: true})
	iat := a.wall
	tok := a.mintAt(t, iat)
	exp := iat.Add(capability.Lifetime)
	for _, tc := range []struct {
		name   string
		at     time.Time
		reason string
	}{
		{"iat-1h", iat.Add(-time.Hour), RefusedNotYetValid},
		{"iat-16s", iat.Add(-16 * time.Second), RefusedNotYetValid},
		{"iat-15s", iat.Add(-15 * time.Second), ""},
		{"exp+15s", exp.Add(15 * time.Second), ""},
		{"exp+16s", exp.Add(16 * time.Second), RefusedVerify},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Only the window moves: a.now, not the clocks of the jump check.
			a.now = func() time.Time { return tc.at }
			ref := a.check(tok, capability.OpExec)
			switch {
			case tc.reason == "" && ref != nil:
				t.Fatalf("refused at %s: %v (%s)", tc.name, ref.err, ref.reason)
			case tc.reason != "" && (ref == nil || ref.reason != tc.reason):
				t.Fatalf("at %s: %+v, want refusal %s", tc.name, ref, tc.reason)
			}
		})
	}
}

// TestBridgeClockAgreement (E-12): no clock verdict from the node, a verdict
// of disagreement, or a jump of the wall clock since an agreeing verdict
// refuses every capability with the clock refusal.
func TestBridgeClockAgreement(t *testing.T) {
	a := newTestAdmission(t)
	tok := a.mintAt(t, a.wall)
	want := func(when, reason, text string) {
		t.Helper()
		ref := a.check(tok, capability.OpExec)
		if reason == "" {
			if ref != nil {
				t.Fatalf("%s: refused: %v", when, ref.err)
			}
			return
		}
		if ref == nil || ref.reason != reason || !errors.As(ref.err, new(clockRefusal)) || !strings.Contains(ref.err.Error(), text) {
			t.Fatalf("%s: %+v, want %s saying %q", when, ref, reason, text)
		}
	}
	want("before any verdict", RefusedClock, "has not told the host bridge")
	a.setClock(ClockRequest{Agreed: false, OffsetMS: 3_600_000, Reason: "node clock differs from the control plane's by -3600.0s"})
	want("the node disagrees", RefusedClock, "by -3600.0s")
	a.setClock(ClockRequest{Agreed: true, OffsetMS: 2000, BoundMS: 10})
	want("the node agrees", "", "")
	a.wall, a.mono = a.wall.Add(time.Second), a.mono+time.Second
	want("a second later", "", "")
	a.wall = a.wall.Add(-time.Hour)
	a.now = func() time.Time { return a.wall }
	want("wall clock set back an hour", RefusedClock, "set by -1h0m0s")
	a.wall = a.wall.Add(time.Hour + 12*time.Second)
	a.now = func() time.Time { return a.wall }
	// The node was 2 s behind; set 12 s ahead it is 10 s ahead (and
	// 10 ms of error): inside the skew. 6 s more: 16 s ahead.
	want("set 12 s ahead", "", "")
	a.wall = a.wall.Add(6 * time.Second)
	want("set 18 s ahead", RefusedClock, "set by 18s")
}

// TestRealBridgeClockAndFutureTokens: the bridge process answers 503
// clock_disagrees before its node's verdict and while it disagrees, and 403
// to a capability issued an hour ahead.
func TestRealBridgeClockAndFutureTokens(t *testing.T) {
	raw, _, _ := startBridge(t)
	ok, signer, id := admitted(t, raw)
	get := func(hc *http.Client) (int, string) { return getEnvs(t, hc) }
	if code, body := get(ok); code != http.StatusOK {
		t.Fatalf("in agreement: HTTP %d %s", code, body)
	}
	pushClock(t, raw, ClockRequest{Agreed: false, OffsetMS: -3_600_000, Reason: "node clock differs from the control plane's by +3600.0s; capabilities refused until it agrees"})
	if code, body := get(ok); code != http.StatusServiceUnavailable || !refusedWith(body, errdefs.ErrClockSkew) || !strings.Contains(body, "by +3600.0s") {
		t.Errorf("while the node disagrees: HTTP %d %s, want 503 clock_disagrees", code, body)
	}
	pushClock(t, raw, ClockRequest{Agreed: true})
	if code, body := get(ok); code != http.StatusOK {
		t.Fatalf("in agreement again: HTTP %d %s", code, body)
	}
	future := signer.WithClock(func() time.Time { return time.Now().Add(time.Hour) })
	if code, body := get(withCapability(t, raw, future, id, capability.OpExec)); code != http.StatusForbidden || !strings.Contains(body, "not yet valid") {
		t.Errorf("a capability issued an hour ahead: HTTP %d %s, want 403 not yet valid", code, body)
	}
	resp, err := raw.Get("http://bridge/bridge/v1/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Refusals map[string]uint64 `json:"refusals"`
	}
	json.NewDecoder(resp.Body).Decode(&m)
	resp.Body.Close()
	if m.Refusals[RefusedClock] != 1 || m.Refusals[RefusedNotYetValid] != 1 {
		t.Errorf("refusals %v, want one clock and one not yet valid", m.Refusals)
	}
}
