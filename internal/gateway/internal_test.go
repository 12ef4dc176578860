package gateway

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/egress"
)

func internalList(t *testing.T, version uint64, cidrs ...string) *egress.InternalSet {
	t.Helper()
	s, err := egress.ParseInternalCIDRs(version, cidrs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestInternalServiceRefused: an address on the deployment's internal-service
// list is refused and never dialled, although the policy allows the internet
// and names that address in an allow CIDR; its neighbour on the same
// upstream is reached.
func TestInternalServiceRefused(t *testing.T) {
	h := startHarness(t, `{"allow_internet": true, "allow": {"cidrs": ["20.0.0.11/32", "0.0.0.0/0"]}}`)
	var internal egress.InternalHolder
	internal.Store(internalList(t, 1, "20.0.0.11/32"))
	h.gw.cfg.Internal = &internal
	if body, err := h.get(t, "20.0.0.11:80", "20.0.0.11"); err == nil {
		t.Fatalf("reached an internal service: %q", body)
	}
	if h.dialer.dialled("20.0.0.11:80") {
		t.Error("the gateway dialled an internal service's address")
	}
	if got := h.counters.Snapshot()[ReasonInternalService]; got != 1 {
		t.Errorf("%s counted %d times, want 1: %v", ReasonInternalService, got, h.counters.Snapshot())
	}
	if body, err := h.get(t, "20.0.0.10:80", "20.0.0.10"); err != nil || !strings.Contains(body, "hello") {
		t.Fatalf("an address off the list: %q, %v", body, err)
	}
}

// TestInternalServiceUDP: UDP to a listed address is counted under its own
// reason, not as ordinary UDP.
func TestInternalServiceUDP(t *testing.T) {
	h := startHarness(t, `{"allow_internet": true}`)
	var internal egress.InternalHolder
	internal.Store(internalList(t, 1, "20.0.0.11/32"))
	h.gw.cfg.Internal = &internal
	c, err := h.g.DialUDP(netip.MustParseAddrPort("20.0.0.11:5432"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for h.counters.Snapshot()[ReasonInternalService] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no %s refusal counted for UDP: %v", ReasonInternalService, h.counters.Snapshot())
		}
		c.Write([]byte("x")) // the first datagrams may wait for ARP
		time.Sleep(50 * time.Millisecond)
	}
	if h.counters.Snapshot()[ReasonUDP] != 0 {
		t.Errorf("UDP to an internal service counted as plain UDP: %v", h.counters.Snapshot())
	}
}

// TestInternalListLive: before any list every destination is refused; a
// list stored in the node's holder applies to the running gateway at once,
// and a newer one replaces it.
func TestInternalListLive(t *testing.T) {
	h := startHarness(t, `{"allow_internet": true}`)
	var internal egress.InternalHolder
	h.gw.cfg.Internal = &internal
	if body, err := h.get(t, "20.0.0.10:80", "20.0.0.10"); err == nil {
		t.Fatalf("reached the internet before the node had an internal-service list: %q", body)
	}
	if h.dialer.dialled("20.0.0.10:80") {
		t.Fatal("dialled before the node had an internal-service list")
	}
	internal.Store(internalList(t, 1, "20.0.0.11"))
	if _, err := h.get(t, "20.0.0.10:80", "20.0.0.10"); err != nil {
		t.Fatalf("list v1: an address off the list: %v", err)
	}
	if _, err := h.get(t, "20.0.0.11:80", "20.0.0.11"); err == nil {
		t.Fatal("list v1: reached a listed address")
	}
	internal.Store(internalList(t, 2, "20.0.0.10"))
	if _, err := h.get(t, "20.0.0.10:80", "20.0.0.10"); err == nil {
		t.Fatal("list v2: reached a newly listed address")
	}
	if _, err := h.get(t, "20.0.0.11:80", "20.0.0.11"); err != nil {
		t.Fatalf("list v2: an address no longer listed: %v", err)
	}
}
