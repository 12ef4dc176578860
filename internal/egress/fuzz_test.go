package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(testPolicy))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"allow_internet":true,"allow":{"ports":["1-65535"]}}`))
	f.Add([]byte(`{"allow":{"domains":["*.co.uk","xn--bcher-kva.de"],"cidrs":["::/0","10.0.0.0/8","fe80::1"]}}`))
	f.Add([]byte(`{"deny":{"domains":["*.zip"],"ports":["65535-1"]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePolicy(b)
		if err != nil {
			if p != nil {
				t.Fatalf("ParsePolicy returned a policy and error %v", err)
			}
			return
		}
		// A policy that parsed must decide without panicking, never open
		// the metadata address, and survive a round trip through NewPolicy.
		if d := p.AllowConnection(netip.MustParseAddr("169.254.169.254"), 80, ""); d.Allow {
			t.Fatalf("policy %s allowed the metadata address: %+v", b, d)
		}
		if _, err := NewPolicy(p.Spec()); err != nil {
			t.Fatalf("Spec() of a valid policy does not rebuild: %v", err)
		}
	})
}

func FuzzAllowConnection(f *testing.F) {
	f.Add([]byte{10, 0, 0, 1}, uint16(443), "api.example.com")
	f.Add([]byte{169, 254, 169, 254}, uint16(80), "")
	f.Add(netip.MustParseAddr("64:ff9b::a00:1").AsSlice(), uint16(443), "A.PYPI.ORG.")
	f.Add(netip.MustParseAddr("2002:a00:1::1").AsSlice(), uint16(1), "")
	f.Add(netip.MustParseAddr("::ffff:192.168.0.1").AsSlice(), uint16(0), "x")
	policies := []*Policy{
		mustParse(f, testPolicy),
		mustParse(f, `{"allow_internet":true,"allow":{"cidrs":["0.0.0.0/0","::/0","10.0.0.0/8","fd00::/8"]}}`),
	}
	f.Fuzz(func(t *testing.T, ip []byte, port uint16, domain string) {
		a, ok := netip.AddrFromSlice(ip)
		for _, p := range policies {
			d := p.AllowConnection(a, port, domain)
			if d.Reason == "" {
				t.Fatalf("AllowConnection(%v, %d, %q) gave no reason", a, port, domain)
			}
			if !d.Allow || !ok {
				continue
			}
			// Whatever was allowed is never loopback, multicast,
			// unspecified or metadata, in any form.
			u := a.Unmap()
			if u.IsLoopback() || u.IsMulticast() || u.IsUnspecified() || u == netip.MustParseAddr("169.254.169.254") {
				t.Fatalf("AllowConnection(%v) allowed: %+v", a, d)
			}
			if v4, _, emb := embedded(u); emb && classify(v4) != nil {
				t.Fatalf("AllowConnection(%v) allowed an address embedding %v: %+v", a, v4, d)
			}
		}
	})
}

func FuzzAllowQuery(f *testing.F) {
	f.Add("api.example.com")
	f.Add("_http._tcp.a.b.pypi.org.")
	f.Add(strings.Repeat("a", 41) + ".t.evil.org")
	f.Add("bücher.de")
	f.Add("example.com:443")
	f.Add("[::1]:80")
	p := mustParse(f, testPolicy)
	open := mustParse(f, `{"allow_internet":true}`)
	f.Fuzz(func(t *testing.T, name string) {
		for _, p := range []*Policy{p, open} {
			d := p.AllowQuery(name)
			if d.Allow {
				n := strings.TrimSuffix(name, ".")
				if len(n) > MaxNameLen || strings.Count(n, ".") >= MaxQueryLabels {
					t.Fatalf("AllowQuery(%q) allowed past the tunnel bounds: %+v", name, d)
				}
			}
			_ = p.CheckSNI(name, name)
			_ = p.CheckHost("", name)
			if d := p.CheckHost(name, name+":443"); !d.Allow && p.AllowQuery(name).Allow && !strings.Contains(name, ":") && !strings.HasPrefix(name, "[") {
				t.Fatalf("CheckHost(%q, %q) denied a name AllowQuery accepts: %+v", name, name+":443", d)
			}
		}
	})
}

func BenchmarkAllowConnection(b *testing.B) {
	p := mustParse(b, testPolicy)
	dst := netip.MustParseAddr("93.184.216.34")
	for b.Loop() {
		_ = p.AllowConnection(dst, 443, "files.pypi.org")
	}
}

func BenchmarkAllowQuery(b *testing.B) {
	p := mustParse(b, testPolicy)
	for b.Loop() {
		_ = p.AllowQuery("files.pypi.org")
	}
}
