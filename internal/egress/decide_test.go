package egress

import (
	"net/netip"
	"strings"
	"sync"
	"testing"
)

func mustParse(t testing.TB, s string) *Policy {
	t.Helper()
	p, err := ParsePolicy([]byte(s))
	if err != nil {
		t.Fatalf("ParsePolicy(%s): %v", s, err)
	}
	return p
}

const testPolicy = `{
	"allow": {"domains": ["api.example.com", "*.pypi.org"], "cidrs": ["93.184.216.0/24", "2606:4700::/32"]},
	"deny":  {"domains": ["bad.pypi.org"], "cidrs": ["93.184.216.66/32"], "ports": ["25", "6000-6010"]}
}`

func TestAllowConnection(t *testing.T) {
	closed := mustParse(t, testPolicy)
	open := mustParse(t, strings.Replace(testPolicy, "{", `{"allow_internet": true,`, 1))
	ports := mustParse(t, `{"allow_internet": true, "allow": {"ports": ["443", "8000-8100"]}}`)
	tests := []struct {
		name   string
		p      *Policy
		addr   string
		port   uint16
		domain string
		allow  bool
		reason string
	}{
		{"allowed domain", closed, "1.1.1.1", 443, "api.example.com", true, "allow.domains api.example.com"},
		{"domain case and dot folded", closed, "1.1.1.1", 443, "API.Example.COM.", true, "allow.domains"},
		{"wildcard subdomain", closed, "1.1.1.1", 443, "files.pypi.org", true, "allow.domains *.pypi.org"},
		{"wildcard apex", closed, "1.1.1.1", 443, "pypi.org", false, "allow_internet is false"},
		{"deny domain beats allow", closed, "1.1.1.1", 443, "bad.pypi.org", false, "deny.domains bad.pypi.org"},
		{"deny domain beats internet", open, "1.1.1.1", 443, "bad.pypi.org", false, "deny.domains"},
		{"domain rule needs the domain", closed, "1.1.1.1", 443, "", false, "allow_internet is false"},
		{"other domain", closed, "1.1.1.1", 443, "example.net", false, "allow_internet is false"},
		{"allowed cidr raw ip", closed, "93.184.216.34", 443, "", true, "allow.cidrs 93.184.216.0/24"},
		{"allowed cidr v4-mapped", closed, "::ffff:93.184.216.34", 443, "", true, "allow.cidrs 93.184.216.0/24"},
		{"allowed cidr v6", closed, "2606:4700::1111", 443, "", true, "allow.cidrs 2606:4700::/32"},
		{"deny cidr beats allow cidr", closed, "93.184.216.66", 443, "", false, "deny.cidrs 93.184.216.66/32"},
		{"deny cidr beats allow domain", closed, "93.184.216.66", 443, "api.example.com", false, "deny.cidrs"},
		{"deny port", closed, "93.184.216.34", 25, "", false, "deny.ports 25"},
		{"deny port range", open, "1.1.1.1", 6005, "", false, "deny.ports 6000-6010"},
		{"default allow", open, "1.1.1.1", 443, "", true, "allow_internet"},
		{"default deny", closed, "1.1.1.1", 443, "", false, "allow_internet is false"},
		{"private beats internet", open, "10.0.0.1", 443, "api.example.com", false, "always denied"},
		{"mapped private", open, "::ffff:10.0.0.1", 443, "", false, "private 10.0.0.0/8"},
		{"metadata with allowed domain", closed, "169.254.169.254", 80, "api.example.com", false, "metadata"},
		{"port filter in", ports, "1.1.1.1", 8050, "", true, "allow_internet"},
		{"port filter out", ports, "1.1.1.1", 22, "", false, "not in allow.ports"},
		{"port 0", open, "1.1.1.1", 0, "", false, "port 0"},
		{"invalid addr", open, "", 443, "", false, "invalid"},
		{"zoned addr", open, "2606:4700::1%eth0", 443, "", false, "zone"},
		{"bad domain", open, "1.1.1.1", 443, "a..b", false, "empty label"},
		{"nil policy", nil, "1.1.1.1", 443, "", false, "allow_internet is false"},
		{"zero policy", &Policy{}, "1.1.1.1", 443, "", false, "allow_internet is false"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var a netip.Addr
			if tc.addr != "" {
				a = netip.MustParseAddr(tc.addr)
			}
			d := tc.p.AllowConnection(a, tc.port, tc.domain)
			if d.Allow != tc.allow || !strings.Contains(d.Reason, tc.reason) {
				t.Fatalf("AllowConnection(%s, %d, %q) = %+v, want allow=%v reason containing %q",
					tc.addr, tc.port, tc.domain, d, tc.allow, tc.reason)
			}
		})
	}
}

func TestAllowQuery(t *testing.T) {
	closed := mustParse(t, testPolicy)
	open := mustParse(t, `{"allow_internet": true, "deny": {"domains": ["*.evil.net"]}}`)
	label40 := strings.Repeat("a1", 20)
	tests := []struct {
		name   string
		p      *Policy
		q      string
		allow  bool
		reason string
	}{
		{"allowed", closed, "api.example.com", true, "allow.domains"},
		{"0x20 case", closed, "aPi.ExAmPlE.cOm.", true, "allow.domains"},
		{"wildcard", closed, "a.b.pypi.org", true, "allow.domains *.pypi.org"},
		{"apex not wildcard", closed, "pypi.org", false, "allow_internet is false"},
		{"deny wins", closed, "bad.pypi.org", false, "deny.domains"},
		{"closed default", closed, "example.net", false, "allow_internet is false"},
		{"open default", open, "example.net", true, "allow_internet"},
		{"open deny", open, "x.evil.net", false, "deny.domains *.evil.net"},
		{"srv underscore", open, "_http._tcp.example.net", true, "allow_internet"},
		{"localhost", open, "localhost", false, "always denied"},
		{"sub localhost", open, "a.localhost", false, "always denied"},
		{"gcp metadata", open, "metadata.google.internal", false, "always denied"},
		{"10 labels", open, "a.b.c.d.e.f.g.h.i.com", true, "allow_internet"},
		{"11 labels", open, "a.b.c.d.e.f.g.h.i.j.com", false, "11 labels"},
		{"40 plain", open, label40 + ".example.net", true, "allow_internet"},
		{"41 plain", open, label40 + "b.example.net", false, "encoded data"},
		{"hex blob", open, strings.Repeat("deadbeef", 7) + ".t.evil.org", false, "encoded data"},
		{"long hyphenated label ok", open, strings.Repeat("abcd-", 10) + "x.example.net", true, "allow_internet"},
		{"label 64", open, strings.Repeat("a-", 32) + ".com", false, "longer than 63"},
		{"name 254", open, strings.Repeat("a-b.", 63) + "abcd.com", false, "longer than 253"},
		{"empty", open, "", false, "empty name"},
		{"root", open, ".", false, "empty name"},
		{"binary", open, "a\x00b.com", false, "character"},
		{"non-ascii", open, "bücher.de", false, "punycode"},
		{"ip literal", open, "10.0.0.1", false, "use cidrs"},
		{"nil", nil, "example.com", false, "allow_internet is false"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.p.AllowQuery(tc.q)
			if d.Allow != tc.allow || !strings.Contains(d.Reason, tc.reason) {
				t.Fatalf("AllowQuery(%q) = %+v, want allow=%v reason containing %q", tc.q, d, tc.allow, tc.reason)
			}
		})
	}
}

func TestCheckSNIAndHost(t *testing.T) {
	p := mustParse(t, `{"allow_internet": true, "deny": {"domains": ["evil.example.net"]}}`)
	sni := []struct {
		conn, sni string
		allow     bool
	}{
		{"api.example.com", "api.example.com", true},
		{"api.example.com", "API.EXAMPLE.COM.", true},
		{"API.example.com.", "api.example.com", true},
		{"api.example.com", "other.example.com", false},
		{"api.example.com", "example.com", false},
		{"api.example.com", "", false},
		{"api.example.com", "a..b", false},
		{"a..b", "a..b", false},
		{"", "", true},
		{"", "anything.example.org", true},
		{"", "evil.example.net", false},
		{"", "1.2.3.4", true},
	}
	for _, tc := range sni {
		if d := p.CheckSNI(tc.conn, tc.sni); d.Allow != tc.allow {
			t.Errorf("CheckSNI(%q, %q) = %+v, want allow=%v", tc.conn, tc.sni, d, tc.allow)
		}
	}
	host := []struct {
		conn, host string
		allow      bool
	}{
		{"api.example.com", "api.example.com", true},
		{"api.example.com", "api.example.com:8443", true},
		{"api.example.com", "Api.Example.Com.:443", true},
		{"api.example.com", "other.example.com:443", false},
		{"api.example.com", "1.2.3.4:80", false},
		{"api.example.com", "[2606:4700::1]:443", false},
		{"api.example.com", "", false},
		{"", "[2606:4700::1]:443", true},
		{"", "evil.example.net:80", false},
		{"", "fine.example.org:80", true},
	}
	for _, tc := range host {
		if d := p.CheckHost(tc.conn, tc.host); d.Allow != tc.allow {
			t.Errorf("CheckHost(%q, %q) = %+v, want allow=%v", tc.conn, tc.host, d, tc.allow)
		}
	}
	var nilp *Policy
	if d := nilp.CheckSNI("a.example.com", "b.example.com"); d.Allow {
		t.Errorf("nil CheckSNI mismatch allowed: %+v", d)
	}
}

func TestHolder(t *testing.T) {
	var h Holder
	dst := netip.MustParseAddr("1.1.1.1")
	if d := h.Load().AllowConnection(dst, 443, ""); d.Allow {
		t.Fatalf("zero Holder allowed a connection: %+v", d)
	}
	open := mustParse(t, `{"allow_internet": true}`)
	closed := mustParse(t, `{}`)
	h.Store(open)
	if d := h.Load().AllowConnection(dst, 443, ""); !d.Allow {
		t.Fatalf("after Store(open): %+v", d)
	}
	// Concurrent swaps and reads see one whole policy or the other (run
	// with -race to check the swap is atomic).
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				if j%2 == 0 {
					h.Store(closed)
				} else {
					h.Store(open)
				}
				_ = h.Load().AllowConnection(dst, 443, "")
			}
		}()
	}
	wg.Wait()
	h.Store(closed)
	if d := NewHolder(closed).Load().AllowConnection(dst, 443, ""); d.Allow {
		t.Fatalf("closed policy allowed: %+v", d)
	}
	h.Store(nil)
	if h.Load() == nil {
		t.Fatal("Load returned nil after Store(nil)")
	}
}
