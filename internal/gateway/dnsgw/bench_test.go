package dnsgw

import (
	"context"
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/spacesandbox/space/internal/egress"
)

// staticUpstream answers every lookup with the same addresses.
type staticUpstream []netip.Addr

func (s staticUpstream) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return s, nil
}

// BenchmarkAnswer measures one allowed A query answered from an in-memory
// upstream, and one refused by the policy.
func BenchmarkAnswer(b *testing.B) {
	for _, c := range []struct{ name, qname string }{
		{"allowed", "example.com."},
		{"refused", "evil.example.com."},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := newTestEnv(b, func(cfg *Config) {
				cfg.Upstream = staticUpstream{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")}
				cfg.Policy.Store(mustPolicy(b, egress.Spec{AllowInternet: true, Deny: egress.RuleSet{Domains: []string{"evil.example.com"}}}))
				cfg.Log = nil
				cfg.Now = nil
				cfg.QueriesPerSecond, cfg.Burst = 1e12, 1<<30
			})
			q := query(b, 1, c.qname, dnsmessage.TypeA)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if e.srv.Answer(ctx, q) == nil {
					b.Fatal("nil reply")
				}
			}
		})
	}
}
