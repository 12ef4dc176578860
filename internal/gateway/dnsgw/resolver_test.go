package dnsgw

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/gateway/dnsgw/dnstest"
)

// TestRealResolver runs Answer end to end over a real UDP DNS server and a
// pure-Go net.Resolver, the way the gateway is wired.
func TestRealResolver(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up := dnstest.Start(pc, map[string][]netip.Addr{
		"dual.dnsgw.test":  {netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("2001:db8::10")},
		"only4.dnsgw.test": {netip.MustParseAddr("192.0.2.4")},
	})
	t.Cleanup(up.Close)

	clk := newFakeClock()
	names := NewNameTable(0, clk.now)
	pol := egress.NewHolder(mustPolicy(t, egress.Spec{Allow: egress.RuleSet{Domains: []string{"*.dnsgw.test"}}}))
	srv, err := New(Config{Policy: pol, Upstream: up.Resolver(), Names: names, Now: clk.now, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	tests := []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		want  []netip.Addr
	}{
		{"Dual.DNSGW.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11")}},
		{"dual.dnsgw.test.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []netip.Addr{netip.MustParseAddr("2001:db8::10")}},
		{"only4.dnsgw.test.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, nil}, // NODATA, not NXDOMAIN
		{"missing.dnsgw.test.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		{"denied.example.com.", dnsmessage.TypeA, dnsmessage.RCodeRefused, nil},
		{"dual.dnsgw.test.", dnsmessage.TypeTXT, dnsmessage.RCodeSuccess, nil},
	}
	for i, tt := range tests {
		r := srv.Answer(ctx, query(t, uint16(1000+i), tt.name, tt.typ))
		var m dnsmessage.Message
		if err := m.Unpack(r); err != nil {
			t.Fatalf("%s %v: reply does not parse: %v", tt.name, tt.typ, err)
		}
		if got := answerAddrs(m); m.ID != uint16(1000+i) || m.RCode != tt.rcode || !slices.Equal(got, tt.want) {
			t.Errorf("%s %v: id %d rcode %v answers %v; want id %d rcode %v answers %v",
				tt.name, tt.typ, m.ID, m.RCode, got, 1000+i, tt.rcode, tt.want)
		}
	}

	if got := names.Domains(netip.MustParseAddr("192.0.2.11")); !slices.Equal(got, []string{"dual.dnsgw.test"}) {
		t.Errorf("Domains(192.0.2.11) = %q, want [dual.dnsgw.test]", got)
	}
	// A, AAAA, TXT(not sent) for dual; the AAAA and the confirming A for
	// only4; A and the confirming AAAA for missing; nothing for denied.
	for name, want := range map[string]int{"dual.dnsgw.test": 2, "only4.dnsgw.test": 2, "missing.dnsgw.test": 2, "denied.example.com": 0} {
		if got := up.Queries(name); got != want {
			t.Errorf("upstream queries for %s: %d, want %d", name, got, want)
		}
	}
	if st := srv.Stats(); st != (Stats{Answered: 4, Refused: 1, Unsupported: 1}) {
		t.Errorf("Stats %+v", st)
	}
}
