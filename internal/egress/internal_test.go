package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestInternalSetCheck(t *testing.T) {
	set, err := ParseInternalCIDRs(1, []string{"11.22.33.44", "45.0.0.0/24", "2a01:4f8::/32", "::ffff:93.184.216.34/128"})
	if err != nil {
		t.Fatal(err)
	}
	// A policy that allows the internet and names the internal addresses
	// in its allow CIDRs: the list still wins.
	pol := mustParse(t, `{"allow_internet":true,"allow":{"cidrs":["11.22.33.44/32","45.0.0.0/24","2a01:4f8::/32","0.0.0.0/0"]}}`)
	for _, tc := range []struct {
		dst    string
		denied bool
	}{
		{"11.22.33.44", true},
		{"::ffff:11.22.33.44", true}, // IPv4-mapped
		{"64:ff9b::b16:212c", true},  // NAT64 of 11.22.33.44
		{"2002:b16:212c::1", true},   // 6to4 of 11.22.33.44
		{"::b16:212c", true},         // IPv4-compatible of 11.22.33.44
		{"45.0.0.200", true},         // in the prefix
		{"2a01:4f8:1::5", true},      // IPv6 prefix
		{"93.184.216.34", true},      // listed in its mapped form
		{"::ffff:45.0.0.1", true},    // mapped, in the prefix
		{"11.22.33.45", false},       // next door
		{"45.0.1.1", false},          // outside the prefix
		{"2a02::1", false},           // outside the IPv6 prefix
		{"64:ff9b::808:808", false},  // NAT64 of a public address not listed
		{"::ffff:8.8.8.8", false},    // mapped, not listed
	} {
		a := netip.MustParseAddr(tc.dst)
		d := set.Check(a)
		if d.Allow == tc.denied {
			t.Errorf("Check(%s) = %+v, want denied %v", tc.dst, d, tc.denied)
		}
		if tc.denied && !strings.Contains(d.Reason, "service of this deployment") {
			t.Errorf("Check(%s) reason %q does not say why", tc.dst, d.Reason)
		}
		if !tc.denied {
			if p := pol.AllowConnection(a, 5432, ""); !p.Allow && a.Unmap().Is4() && !a.Is4In6() {
				t.Errorf("control: policy itself denies %s: %+v", tc.dst, p)
			}
		}
	}
	// The policy alone allows the listed addresses: only the list stops them.
	if d := pol.AllowConnection(netip.MustParseAddr("11.22.33.44"), 5432, ""); !d.Allow {
		t.Fatalf("control: the policy should allow 11.22.33.44: %+v", d)
	}
}

func TestInternalSetNoList(t *testing.T) {
	var h InternalHolder
	for _, a := range []string{"8.8.8.8", "2606:4700::1111"} {
		if d := h.Load().Check(netip.MustParseAddr(a)); d.Allow || !strings.Contains(d.Reason, "no internal-service list") {
			t.Errorf("before any list, Check(%s) = %+v, want denied for want of a list", a, d)
		}
	}
}

func TestInternalHolderNewerOnly(t *testing.T) {
	var h InternalHolder
	v1, _ := ParseInternalCIDRs(5, []string{"11.0.0.1"})
	v2, _ := ParseInternalCIDRs(6, []string{"11.0.0.2"})
	old, _ := ParseInternalCIDRs(4, []string{"11.0.0.3"})
	if !h.Store(v1) || !h.Store(v2) {
		t.Fatal("a newer list was not stored")
	}
	if h.Store(old) || h.Store(v1) {
		t.Fatal("an older list replaced a newer one")
	}
	if got := h.Load().Version(); got != 6 {
		t.Fatalf("version %d, want 6", got)
	}
	if d := h.Load().Check(netip.MustParseAddr("11.0.0.2")); d.Allow {
		t.Fatalf("the current list does not deny its address: %+v", d)
	}
	if d := h.Load().Check(netip.MustParseAddr("11.0.0.1")); !d.Allow {
		t.Fatalf("the replaced list still applies: %+v", d)
	}
}

func TestParseInternalCIDR(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: "203.0.113.7", want: "203.0.113.7/32"},
		{in: "45.1.2.3/24", want: "45.1.2.0/24"},
		{in: "::ffff:45.1.2.3", want: "45.1.2.3/32"},
		{in: "::ffff:45.1.2.0/120", want: "45.1.2.0/24"},
		{in: "2a01:4f8::1/48", want: "2a01:4f8::/48"},
		{in: "0.0.0.0/0", err: "every address"},
		{in: "::/0", err: "every address"},
		{in: "::ffff:0.0.0.0/90", err: "IPv4-mapped"},
		{in: "fe80::1%eth0", err: "want an address"},
		{in: "fe80::1%eth0/64", err: "want an address"},
		{in: "example.com", err: "want an address"},
		{in: "10.0.0.0/33", err: "want an address"},
		{in: "", err: "want an address"},
	} {
		p, err := ParseInternalCIDR(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseInternalCIDR(%q) = %v, %v; want error containing %q", tc.in, p, err, tc.err)
			}
			continue
		}
		if err != nil || p.String() != tc.want {
			t.Errorf("ParseInternalCIDR(%q) = %v, %v; want %s", tc.in, p, err, tc.want)
		}
	}
	if _, err := ParseInternalCIDRs(1, make([]string, MaxInternalPrefixes+1)); err == nil {
		t.Error("an oversized list parsed")
	}
}

// FuzzInternalSet: whatever list parses, every address it names is denied
// in its plain, IPv4-mapped and NAT64 forms, and Check never panics.
func FuzzInternalSet(f *testing.F) {
	f.Add("11.22.33.44", []byte{11, 22, 33, 44})
	f.Add("::ffff:1.2.3.0/120", netip.MustParseAddr("64:ff9b::102:305").AsSlice())
	f.Add("2a01:4f8::/32", netip.MustParseAddr("2a01:4f8::1").AsSlice())
	f.Add("45.0.0.0/8", netip.MustParseAddr("2002:2d00:1::").AsSlice())
	f.Fuzz(func(t *testing.T, cidr string, ip []byte) {
		set, err := ParseInternalCIDRs(1, strings.Split(cidr, ","))
		if err != nil {
			return
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			// The indexed lookup agrees with a scan of the list.
			if got, want := !set.Check(a).Allow, naiveDenied(set.Prefixes(), a); got != want {
				t.Fatalf("list %q: Check(%s) denied %v, a scan says %v", cidr, a, got, want)
			}
		}
		for _, p := range set.Prefixes() {
			a := p.Addr()
			forms := []netip.Addr{a}
			if a.Is4() {
				b := a.As4()
				forms = append(forms, netip.AddrFrom16(a.As16()),
					netip.AddrFrom16([16]byte{0: 0x00, 1: 0x64, 2: 0xff, 3: 0x9b, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}))
			}
			for _, x := range forms {
				if d := set.Check(x); d.Allow {
					t.Fatalf("list %q: %s (form of %s) allowed: %+v", cidr, x, p, d)
				}
			}
		}
	})
}

// naiveDenied is the reference of InternalSet.Check: a scan of every prefix
// for the address, its IPv4 form and the IPv4 address it embeds.
func naiveDenied(ps []netip.Prefix, a netip.Addr) bool {
	u := a.Unmap()
	cands := []netip.Addr{u}
	if v4, _, ok := embedded(u); ok {
		cands = append(cands, v4)
	}
	for _, c := range cands {
		for _, p := range ps {
			if p.Contains(c) {
				return true
			}
		}
	}
	return false
}
