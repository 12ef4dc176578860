package dnsgw

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/egress"
)

// TestNameTableRebinding (D-4): the NameTable remembers names per address,
// never a verdict per name. A name that resolved to a public address and
// then to a private one is listed for both, and the policy, asked about
// each address with its names, still refuses the private one; a name is
// never listed for an address another name resolved to, so an address
// learnt for allowed domain A is not reachable as domain B.
func TestNameTableRebinding(t *testing.T) {
	p, err := egress.ParsePolicy([]byte(`{"allow_internet": false, "allow": {"domains": ["a.test", "b.test"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	clk := newFakeClock()
	nt := NewNameTable(0, clk.now)
	public, private, metadata := netip.MustParseAddr("20.0.100.7"), netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("169.254.169.254")
	bAddr := netip.MustParseAddr("20.0.100.8")
	nt.Record("a.test", []netip.Addr{public}, time.Minute)
	nt.Record("a.test", []netip.Addr{private}, time.Minute)
	nt.Record("a.test", []netip.Addr{netip.MustParseAddr("::ffff:169.254.169.254")}, time.Minute)
	nt.Record("b.test", []netip.Addr{bAddr}, time.Minute)

	allowed := func(a netip.Addr) (bool, []string) {
		names := nt.Domains(a)
		for _, n := range names {
			if p.AllowConnection(a, 443, n).Allow {
				return true, names
			}
		}
		return false, names
	}
	for _, c := range []struct {
		addr  netip.Addr
		names []string
		allow bool
	}{
		{public, []string{"a.test"}, true},
		{private, []string{"a.test"}, false},
		{metadata, []string{"a.test"}, false},
		{bAddr, []string{"b.test"}, true},
		{netip.MustParseAddr("20.0.100.9"), nil, false},
	} {
		ok, names := allowed(c.addr)
		if !slices.Equal(names, c.names) || ok != c.allow {
			t.Errorf("%s: names %q, allowed %v; want %q, %v", c.addr, names, ok, c.names, c.allow)
		}
	}
	// The connection is allowed for A only: the domain the gateway checks
	// the Host or SNI against is A's, and B is no name of this address.
	if d := p.CheckHost("a.test", "b.test"); d.Allow {
		t.Errorf("a connection allowed for a.test accepts Host b.test")
	}
	// A TTL of 0 records nothing: an answer that must not be cached is not
	// a reason to connect later.
	nt.Record("a.test", []netip.Addr{netip.MustParseAddr("20.0.100.10")}, 0)
	if got := nt.Domains(netip.MustParseAddr("20.0.100.10")); got != nil {
		t.Errorf("TTL 0 recorded %q", got)
	}
}
