package egress

import (
	"fmt"
	"net/netip"
	"testing"
)

// BenchmarkInternalCheck measures the internal-service check a gateway makes
// on every connection, against BenchmarkAllowConnectionBaseline (the policy
// decision the same connection already costs): compare the two as a ratio.
func BenchmarkInternalCheck(b *testing.B) {
	for _, n := range []int{16, 256, MaxInternalPrefixes} {
		cidrs := make([]string, n)
		for i := range cidrs {
			cidrs[i] = fmt.Sprintf("45.%d.%d.0/24", i/256, i%256)
		}
		set, err := ParseInternalCIDRs(1, cidrs)
		if err != nil {
			b.Fatal(err)
		}
		dst := netip.MustParseAddr("93.184.216.34") // not listed: the full scan
		b.Run(fmt.Sprintf("prefixes=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if d := set.Check(dst); !d.Allow {
					b.Fatal(d.Reason)
				}
			}
		})
	}
}

// BenchmarkAllowConnectionBaseline is the policy decision of one connection
// under allow_internet, the baseline of BenchmarkInternalCheck.
func BenchmarkAllowConnectionBaseline(b *testing.B) {
	p := mustParse(b, `{"allow_internet": true}`)
	dst := netip.MustParseAddr("93.184.216.34")
	for i := 0; i < b.N; i++ {
		if d := p.AllowConnection(dst, 443, ""); !d.Allow {
			b.Fatal(d.Reason)
		}
	}
}
