package egress

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

// This file is the policy's reference evaluator (catalogue D-10): the
// decision of the package doc written again as plainly as it can be, over
// the policy's JSON form (strings, not compiled rules), with the
// always-denied addresses taken from IANA's special-purpose address
// registries (every block not globally reachable) rather than from
// reserved.go. TestPolicyMatchesReference and FuzzPolicyMatchesReference
// check that AllowConnection agrees with it on random policies and
// destinations, in the manner of gVisor's secfuzz: compiled(x) ==
// reference(x).

// refBlock is one always-denied block; open says whether an allow CIDR
// inside it lifts the deny (private space a tenant may open on purpose).
type refBlock struct {
	cidr string
	open bool
}

// refMetadata are the cloud metadata endpoints: never opened, whatever the
// policy says.
var refMetadata = []string{
	"169.254.169.254/32", "169.254.169.253/32", "169.254.169.123/32", "169.254.170.2/32",
	"fd00:ec2::254/128", "fd00:ec2::253/128", "100.100.100.200/32", "192.0.0.192/32",
}

// refBlocks are IANA's IPv4 and IPv6 special-purpose blocks that are not
// globally reachable (RFC 6890 and later), with multicast, the deprecated
// site-local and 6to4-relay blocks, and ::/96 (IPv4-compatible, ::, ::1).
var refBlocks = []refBlock{
	{"0.0.0.0/8", false}, {"10.0.0.0/8", true}, {"100.64.0.0/10", true}, {"127.0.0.0/8", false},
	{"169.254.0.0/16", true}, {"172.16.0.0/12", true}, {"192.0.0.0/24", false}, {"192.0.2.0/24", false},
	{"192.88.99.0/24", false}, {"192.168.0.0/16", true}, {"198.18.0.0/15", true}, {"198.51.100.0/24", false},
	{"203.0.113.0/24", false}, {"224.0.0.0/4", false}, {"240.0.0.0/4", false}, {"255.255.255.255/32", false},
	{"::/96", false}, {"64:ff9b:1::/48", false}, {"100::/64", false}, {"2001::/32", false},
	{"2001:2::/48", false}, {"2001:10::/28", false}, {"2001:db8::/32", false}, {"3fff::/20", false},
	{"5f00::/16", false}, {"fc00::/7", true}, {"fe80::/10", true}, {"fec0::/10", false}, {"ff00::/8", false},
}

// refEmbedded returns the IPv4 address inside a NAT64 (64:ff9b::/96),
// 6to4 (2002::/16) or IPv4-compatible (::/96, but :: and ::1) address.
func refEmbedded(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case netip.MustParsePrefix("64:ff9b::/96").Contains(a):
		return netip.AddrFrom4([4]byte(b[12:])), true
	case netip.MustParsePrefix("2002::/16").Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	case netip.MustParsePrefix("::/96").Contains(a) && binary.BigEndian.Uint32(b[12:]) > 1:
		return netip.AddrFrom4([4]byte(b[12:])), true
	}
	return netip.Addr{}, false
}

// refDenied reports whether a is always denied, and the block an allow
// CIDR must lie in to open it (invalid when nothing opens it).
func refDenied(a netip.Addr) (denied bool, opener netip.Prefix) {
	for _, m := range refMetadata {
		if netip.MustParsePrefix(m).Contains(a) {
			return true, netip.Prefix{}
		}
	}
	if v4, ok := refEmbedded(a); ok {
		if d, _ := refDenied(v4); d {
			return true, netip.Prefix{}
		}
	}
	for _, b := range refBlocks {
		p := netip.MustParsePrefix(b.cidr)
		if p.Contains(a) {
			if b.open {
				return true, p
			}
			return true, netip.Prefix{}
		}
	}
	return false, netip.Prefix{}
}

func refDomainMatch(rule, name string) bool {
	if base, ok := strings.CutPrefix(rule, "*."); ok {
		return strings.HasSuffix(name, "."+base)
	}
	return name == rule
}

func refPortMatch(rule string, port uint16) bool {
	lo, hi, ok := strings.Cut(rule, "-")
	if !ok {
		hi = lo
	}
	l, h := refAtoi(lo), refAtoi(hi)
	return l <= int(port) && int(port) <= h
}

func refAtoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

func refCIDR(s string) netip.Prefix {
	if strings.Contains(s, "/") {
		return netip.MustParsePrefix(s)
	}
	a := netip.MustParseAddr(s)
	return netip.PrefixFrom(a, a.BitLen())
}

// reference is the decision of the package doc for a valid policy s and a
// valid domain (or "").
func reference(s Spec, dst netip.Addr, port uint16, domain string) bool {
	if !dst.IsValid() || dst.Zone() != "" || port == 0 {
		return false
	}
	dst = dst.Unmap()
	name := strings.ToLower(strings.TrimSuffix(domain, "."))
	// 1. Always denied, unless an allow CIDR inside an openable block
	// names the address.
	if denied, opener := refDenied(dst); denied {
		opened := false
		for _, c := range s.Allow.CIDRs {
			p := refCIDR(c)
			if opener.IsValid() && p.Contains(dst) && p.Bits() >= opener.Bits() && opener.Contains(p.Addr()) {
				opened = true
			}
		}
		if !opened {
			return false
		}
	}
	// 2. Deny rules.
	for _, d := range s.Deny.Domains {
		if name != "" && refDomainMatch(d, name) {
			return false
		}
	}
	for _, c := range s.Deny.CIDRs {
		if refCIDR(c).Contains(dst) {
			return false
		}
	}
	for _, r := range s.Deny.Ports {
		if refPortMatch(r, port) {
			return false
		}
	}
	// 3. The allow port filter.
	if len(s.Allow.Ports) > 0 {
		in := false
		for _, r := range s.Allow.Ports {
			in = in || refPortMatch(r, port)
		}
		if !in {
			return false
		}
	}
	// 4. Allow rules, then 5. the default.
	for _, d := range s.Allow.Domains {
		if name != "" && refDomainMatch(d, name) {
			return true
		}
	}
	for _, c := range s.Allow.CIDRs {
		if refCIDR(c).Contains(dst) {
			return true
		}
	}
	return s.AllowInternet
}

// The universes random policies and destinations are drawn from: names
// that overlap (apex, subdomain, wildcard), CIDRs public and private, wide
// and narrow, overlapping the always-denied blocks and not.
var (
	refDomainRules = []string{"a.test", "*.a.test", "x.a.test", "b.test", "*.b.test", "*.x.a.test", "c.example.com"}
	refNames       = []string{"a.test", "x.a.test", "y.x.a.test", "b.test", "z.b.test", "c.example.com", "X.A.Test.", "other.org"}
	refCIDRRules   = []string{
		"0.0.0.0/0", "::/0", "8.8.8.0/24", "8.8.8.8", "1.0.0.0/8", "2606:4700::/32", "10.0.0.0/8", "10.1.0.0/16",
		"10.1.2.3", "172.16.0.0/12", "192.168.1.0/24", "169.254.0.0/16", "169.254.169.0/24", "100.64.0.0/10",
		"198.18.0.0/15", "198.19.0.0/16", "fd00::/8", "fe80::/64", "2001:db8::/32", "8.0.0.0/5", "64:ff9b::/96",
		"2002::/16", "192.88.99.0/24", "3fff::/20",
	}
	refPortRules = []string{"443", "80", "8000-8100", "1-1024", "22", "1-65535"}
	refAddrs     = []string{
		"8.8.8.8", "8.8.4.4", "1.1.1.1", "93.184.216.34", "10.1.2.3", "10.9.9.9", "172.16.5.5", "192.168.1.7",
		"169.254.169.254", "169.254.1.1", "169.254.170.2", "100.64.0.1", "100.100.100.200", "127.0.0.1", "0.0.0.0",
		"198.18.0.1", "198.19.1.1", "192.0.2.1", "192.0.0.192", "192.88.99.1", "224.0.0.1", "255.255.255.255",
		"240.0.0.1", "::ffff:10.1.2.3", "::ffff:8.8.8.8", "::ffff:169.254.169.254", "64:ff9b::a01:203",
		"64:ff9b::808:808", "64:ff9b:1::1", "2002:a01:203::1", "2002:808:808::1", "::a01:203", "::1", "::",
		"2606:4700::1111", "2001:4860:4860::8888", "2001:db8::1", "2001::1", "2001:2::1", "2001:10::1", "3fff::1",
		"5f00::1", "fd00::1", "fd00:ec2::254", "fe80::1", "fec0::1", "ff02::1", "100::1",
	}
	refPorts = []uint16{0, 1, 22, 53, 80, 443, 1024, 1025, 8000, 8050, 8100, 8101, 65535}
)

// randomSpec draws a policy from the universes with r.
func randomSpec(r *rand.Rand) Spec {
	pick := func(from []string, max int) []string {
		var out []string
		for range r.IntN(max + 1) {
			out = append(out, from[r.IntN(len(from))])
		}
		return out
	}
	return Spec{
		AllowInternet: r.IntN(2) == 0,
		Allow:         RuleSet{Domains: pick(refDomainRules, 3), CIDRs: pick(refCIDRRules, 3), Ports: pick(refPortRules, 2)},
		Deny:          RuleSet{Domains: pick(refDomainRules, 2), CIDRs: pick(refCIDRRules, 2), Ports: pick(refPortRules, 1)},
	}
}

// checkAgainstReference compares AllowConnection with the reference for
// one policy and every address, port and name of the universes.
func checkAgainstReference(t *testing.T, s Spec, r *rand.Rand, samples int) {
	t.Helper()
	p, err := NewPolicy(s)
	if err != nil {
		t.Fatalf("policy %+v from the universes does not build: %v", s, err)
	}
	for range samples {
		dst := netip.MustParseAddr(refAddrs[r.IntN(len(refAddrs))])
		port := refPorts[r.IntN(len(refPorts))]
		name := ""
		if r.IntN(3) > 0 {
			name = refNames[r.IntN(len(refNames))]
		}
		got := p.AllowConnection(dst, port, name)
		if want := reference(s, dst, port, name); got.Allow != want {
			t.Fatalf("policy %+v, %s port %d for %q: AllowConnection says %v (%s), the reference %v", s, dst, port, name, got.Allow, got.Reason, want)
		}
	}
}

// TestPolicyMatchesReference: 10,000 random policies, 50 connections each.
func TestPolicyMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		checkAgainstReference(t, randomSpec(r), r, 50)
	}
}

// TestReferenceDiffers is the differential's own check: the reference is
// not AllowConnection under another name — it refuses what the package doc
// refuses and allows what it allows.
func TestReferenceDiffers(t *testing.T) {
	open := Spec{AllowInternet: true}
	for addr, want := range map[string]bool{
		"8.8.8.8": true, "10.1.2.3": false, "::ffff:169.254.169.254": false, "64:ff9b::a01:203": false,
		"64:ff9b::808:808": true, "3fff::1": false, "2001:2::1": false,
	} {
		if got := reference(open, netip.MustParseAddr(addr), 443, ""); got != want {
			t.Errorf("reference(allow_internet, %s) = %v, want %v", addr, got, want)
		}
	}
	priv := Spec{Allow: RuleSet{CIDRs: []string{"10.1.0.0/16"}}}
	if !reference(priv, netip.MustParseAddr("10.1.2.3"), 443, "") || reference(Spec{Allow: RuleSet{CIDRs: []string{"0.0.0.0/0"}}}, netip.MustParseAddr("10.1.2.3"), 443, "") {
		t.Error("the reference does not open private space as the package doc says")
	}
}

// FuzzPolicyMatchesReference lets the fuzzer choose the policy and the
// connection (the bytes seed the choices).
func FuzzPolicyMatchesReference(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(0), uint64(0))
	f.Add(uint64(1<<63), uint64(12345))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		r := rand.New(rand.NewPCG(a, b))
		checkAgainstReference(t, randomSpec(r), r, 20)
	})
}
