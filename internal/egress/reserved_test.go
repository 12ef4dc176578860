package egress

import (
	"net/netip"
	"strings"
	"testing"
)

// embed6to4 returns the 6to4 address 2002:V4::1 for v4.
func embed6to4(v4 string) string {
	b := netip.MustParseAddr(v4).As4()
	var a [16]byte
	a[0], a[1] = 0x20, 0x02
	copy(a[2:6], b[:])
	a[15] = 1
	return netip.AddrFrom16(a).String()
}

// TestAlwaysDenied checks every always-denied range, in its IPv4 or IPv6
// form, IPv4-mapped, NAT64 and 6to4, under the most permissive policy
// there is: allow_internet and an allow rule for everything.
func TestAlwaysDenied(t *testing.T) {
	open, err := NewPolicy(Spec{AllowInternet: true, Allow: RuleSet{CIDRs: []string{"0.0.0.0/0", "::/0"}}})
	if err != nil {
		t.Fatal(err)
	}
	v4 := []struct{ addr, want string }{
		{"0.0.0.0", "this-network"},
		{"0.1.2.3", "this-network"},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"10.0.0.1", "private 10.0.0.0/8"},
		{"10.255.255.255", "private 10.0.0.0/8"},
		{"172.16.0.1", "private 172.16.0.0/12"},
		{"172.31.255.255", "private 172.16.0.0/12"},
		{"192.168.1.1", "private 192.168.0.0/16"},
		{"100.64.0.1", "CGNAT"},
		{"100.127.255.255", "CGNAT"},
		{"169.254.1.1", "link-local"},
		{"169.254.169.254", "metadata (AWS/GCP"},
		{"169.254.170.2", "ECS"},
		{"100.100.100.200", "Alibaba"},
		{"192.0.0.192", "Oracle"},
		{"192.0.0.8", "IETF protocol"},
		{"192.0.2.1", "documentation"},
		{"198.18.0.1", "benchmarking"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "broadcast"},
	}
	for _, tc := range v4 {
		forms := map[string]string{
			"v4":     tc.addr,
			"mapped": "::ffff:" + tc.addr,
			"nat64":  "64:ff9b::" + tc.addr,
			"6to4":   embed6to4(tc.addr),
		}
		for form, s := range forms {
			t.Run(form+"/"+s, func(t *testing.T) {
				d := open.AllowConnection(netip.MustParseAddr(s), 443, "")
				if d.Allow {
					t.Fatalf("AllowConnection(%s) allowed (%s), want denied as %s", s, d.Reason, tc.want)
				}
				if !strings.Contains(d.Reason, tc.want) || !strings.Contains(d.Reason, "always denied") {
					t.Errorf("AllowConnection(%s) reason %q, want it to name %q", s, d.Reason, tc.want)
				}
			})
		}
	}
	v6 := []struct{ addr, want string }{
		{"::", "::/96"},
		{"::1", "::/96"},
		{"::10.0.0.1", "IPv4-compatible embedding private"},
		{"::8.8.8.8", "IPv4-compatible"},
		{"fe80::1", "link-local fe80"},
		{"febf:ffff::1", "link-local fe80"},
		{"fc00::1", "unique-local"},
		{"fd12:3456::1", "unique-local"},
		{"fd00:ec2::254", "AWS IPv6"},
		{"ff02::1", "multicast"},
		{"ff05::2", "multicast"},
		{"fec0::1", "site-local"},
		{"2001:db8::1", "documentation"},
		{"2001:0:4136:e378::1", "Teredo"},
		{"64:ff9b:1::a00:1", "local-use NAT64"},
		{"100::1", "discard"},
	}
	for _, tc := range v6 {
		t.Run("v6/"+tc.addr, func(t *testing.T) {
			d := open.AllowConnection(netip.MustParseAddr(tc.addr), 443, "")
			if d.Allow || !strings.Contains(d.Reason, tc.want) {
				t.Fatalf("AllowConnection(%s) = %+v, want denied naming %q", tc.addr, d, tc.want)
			}
		})
	}
	// Public addresses, including in embedded forms, stay allowed.
	for _, s := range []string{"8.8.8.8", "::ffff:8.8.8.8", "64:ff9b::8.8.8.8", embed6to4("1.1.1.1"), "2606:4700::1111", "172.32.0.1", "100.128.0.1", "11.0.0.1"} {
		if d := open.AllowConnection(netip.MustParseAddr(s), 443, ""); !d.Allow {
			t.Errorf("AllowConnection(%s) denied (%s), want allowed", s, d.Reason)
		}
	}
}

// TestOpenPrivateRange checks the documented exception: an allow CIDR lying
// inside an openable range opens it, a broad one does not, and nothing
// opens metadata, loopback or embedded forms.
func TestOpenPrivateRange(t *testing.T) {
	tests := []struct {
		cidrs []string
		addr  string
		allow bool
	}{
		{[]string{"10.0.0.0/8"}, "10.1.2.3", true},
		{[]string{"10.1.0.0/16"}, "10.1.2.3", true},
		{[]string{"10.1.2.3"}, "10.1.2.3", true},
		{[]string{"10.1.0.0/16"}, "::ffff:10.1.2.3", true}, // mapped = its IPv4 form
		{[]string{"10.1.0.0/16"}, "10.2.0.1", false},
		{[]string{"8.0.0.0/5"}, "10.1.2.3", false}, // covers 10/8 but is not about it
		{[]string{"0.0.0.0/0"}, "192.168.0.1", false},
		{[]string{"10.0.0.0/7"}, "10.1.2.3", false}, // starts inside 10/8 but is wider
		{[]string{"10.0.0.0/7"}, "11.1.2.3", true},
		{[]string{"192.168.0.0/15"}, "192.168.0.1", false},
		{[]string{"172.16.0.0/12"}, "172.20.0.1", true},
		{[]string{"100.64.0.0/10"}, "100.64.0.1", true},
		{[]string{"fd00::/8"}, "fd00::1", true},
		{[]string{"fc00::/7"}, "fd00::1", true},
		{[]string{"fe80::/10"}, "fe80::1", true},
		{[]string{"::/0"}, "fd00::1", false},
		{[]string{"10.0.0.0/8"}, "64:ff9b::a00:1", false}, // NAT64 never opens
		{[]string{"10.0.0.0/8"}, embed6to4("10.0.0.1"), false},
		{[]string{"169.254.0.0/16"}, "169.254.169.254", false}, // metadata never opens
		{[]string{"169.254.169.254/32"}, "169.254.169.254", false},
		{[]string{"169.254.0.0/16"}, "169.254.1.1", true},
		{[]string{"fd00:ec2::/32"}, "fd00:ec2::254", false},
		{[]string{"127.0.0.0/8"}, "127.0.0.1", false},
		{[]string{"224.0.0.0/4"}, "224.0.0.1", false},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.cidrs, ",")+"->"+tc.addr, func(t *testing.T) {
			p, err := NewPolicy(Spec{Allow: RuleSet{CIDRs: tc.cidrs}})
			if err != nil {
				t.Fatal(err)
			}
			if d := p.AllowConnection(netip.MustParseAddr(tc.addr), 80, ""); d.Allow != tc.allow {
				t.Fatalf("AllowConnection(%s) = %+v, want allow=%v", tc.addr, d, tc.allow)
			}
		})
	}
	// Opening a private range does not bypass deny rules or the port filter.
	p, err := NewPolicy(Spec{
		Allow: RuleSet{CIDRs: []string{"10.0.0.0/8"}, Ports: []string{"443"}},
		Deny:  RuleSet{CIDRs: []string{"10.9.0.0/16"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr  string
		port  uint16
		allow bool
	}{{"10.1.0.1", 443, true}, {"10.1.0.1", 80, false}, {"10.9.0.1", 443, false}} {
		if d := p.AllowConnection(netip.MustParseAddr(tc.addr), tc.port, ""); d.Allow != tc.allow {
			t.Errorf("AllowConnection(%s, %d) = %+v, want allow=%v", tc.addr, tc.port, d, tc.allow)
		}
	}
}
