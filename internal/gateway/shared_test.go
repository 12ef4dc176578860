package gateway

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestSharedAddressNames: two allowed names that resolve to one address (a
// CDN's) both reach it — the flow is for the name the client presents, not
// for whichever of the names sorts first — while a flow still carries one
// name only, and a name the policy does not allow is refused.
func TestSharedAddressNames(t *testing.T) {
	shared := netip.MustParseAddr("20.0.0.10")
	h := startHarnessResolving(t, `{"allow_internet": false, "allow": {"domains": ["a.cdn.test", "b.cdn.test"]}}`,
		fakeResolver{"a.cdn.test": {shared}, "b.cdn.test": {shared}, "c.cdn.test": {shared}})
	stub := &stubInterceptor{host: "none", flows: make(chan Flow, 4), first: make(chan byte, 4)}
	h.gw.cfg.Interceptor = stub
	h.dialer.mu.Lock()
	h.dialer.to["20.0.0.10:443"] = h.dialer.to["20.0.0.10:80"]
	h.dialer.mu.Unlock()
	h.g.resolve(t, "a.cdn.test")
	h.g.resolve(t, "b.cdn.test")

	for _, name := range []string{"a.cdn.test", "b.cdn.test", "B.CDN.test."} {
		body, err := h.get(t, "20.0.0.10:80", name)
		if err != nil || !strings.Contains(body, "host "+name) {
			t.Errorf("GET with Host %s: %q, %v; want the upstream's answer", name, body, err)
		}
	}
	if _, err := h.get(t, "20.0.0.10:80", "c.cdn.test"); err == nil {
		t.Error("Host c.cdn.test, which the policy does not allow, reached the upstream")
	}

	// TLS: the second name's SNI is the flow's domain.
	stub.host = "b.cdn.test"
	h.tlsHello(t, "20.0.0.10:443", "b.cdn.test")
	select {
	case f := <-stub.flows:
		if f.Domain != "b.cdn.test" || f.SNI != "b.cdn.test" {
			t.Errorf("the flow for SNI b.cdn.test is %+v, want its domain b.cdn.test", f)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the TLS flow for b.cdn.test was refused")
	}

	// One flow, one name: a keep-alive request for the other allowed name
	// on a flow opened for the first is refused.
	before := h.counters.Snapshot()[ReasonHost]
	for len(h.requests) > 0 {
		<-h.requests
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := h.g.dial(ctx, netip.AddrPortFrom(shared, 80))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a.cdn.test\r\n\r\nGET / HTTP/1.1\r\nHost: b.cdn.test\r\nConnection: close\r\n\r\n")
	var reqs []string
	for len(reqs) < 3 {
		select {
		case r := <-h.requests:
			reqs = append(reqs, r.Host)
			continue
		case <-time.After(2 * time.Second):
		}
		break
	}
	if len(reqs) != 1 || reqs[0] != "a.cdn.test" {
		t.Errorf("requests that reached the upstream on the keep-alive flow: %q, want a.cdn.test only", reqs)
	}
	if got := h.counters.Snapshot()[ReasonHost]; got != before+1 {
		t.Errorf("host_mismatch count %d, want %d", got, before+1)
	}
}
