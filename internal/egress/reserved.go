package egress

import (
	"encoding/binary"
	"net/netip"
)

// reservedRange is one always-denied address range.
type reservedRange struct {
	prefix netip.Prefix
	name   string
	// openable reports whether an allow CIDR lying inside prefix may lift
	// the deny (see the package doc, "Opening a private range").
	openable bool
}

func rr(cidr, name string, openable bool) reservedRange {
	return reservedRange{prefix: netip.MustParsePrefix(cidr), name: name, openable: openable}
}

// metadataRanges are the cloud instance metadata endpoints. They are
// checked before everything else and are never openable, even by a rule
// that names them exactly.
var metadataRanges = []reservedRange{
	rr("169.254.169.254/32", "cloud metadata (AWS/GCP/Azure/OpenStack)", false),
	rr("169.254.169.253/32", "cloud DNS (AWS)", false),
	rr("169.254.169.123/32", "cloud time service (AWS)", false),
	rr("169.254.170.2/32", "container metadata (AWS ECS)", false),
	rr("fd00:ec2::254/128", "cloud metadata (AWS IPv6)", false),
	rr("fd00:ec2::253/128", "cloud DNS (AWS IPv6)", false),
	rr("100.100.100.200/32", "cloud metadata (Alibaba)", false),
	rr("192.0.0.192/32", "cloud metadata (Oracle)", false),
}

// reservedRanges are the other always-denied ranges.
var reservedRanges = []reservedRange{
	// IPv4.
	rr("0.0.0.0/8", "this-network 0.0.0.0/8", false),
	rr("127.0.0.0/8", "loopback 127.0.0.0/8", false),
	rr("10.0.0.0/8", "private 10.0.0.0/8", true),
	rr("172.16.0.0/12", "private 172.16.0.0/12", true),
	rr("192.168.0.0/16", "private 192.168.0.0/16", true),
	rr("100.64.0.0/10", "CGNAT 100.64.0.0/10", true),
	rr("169.254.0.0/16", "link-local 169.254.0.0/16", true),
	rr("192.0.0.0/24", "IETF protocol assignments 192.0.0.0/24", false),
	rr("192.0.2.0/24", "documentation 192.0.2.0/24", false),
	rr("192.88.99.0/24", "deprecated 6to4 relay anycast 192.88.99.0/24", false),
	rr("198.18.0.0/15", "benchmarking 198.18.0.0/15", true),
	rr("198.51.100.0/24", "documentation 198.51.100.0/24", false),
	rr("203.0.113.0/24", "documentation 203.0.113.0/24", false),
	rr("224.0.0.0/4", "multicast 224.0.0.0/4", false),
	rr("255.255.255.255/32", "broadcast 255.255.255.255", false),
	rr("240.0.0.0/4", "reserved 240.0.0.0/4", false),
	// IPv6. ::/128, ::1 and the IPv4-compatible ::/96 are covered by
	// embedded() and the ::/96 entry below.
	rr("::/96", "IPv4-compatible/unspecified/loopback ::/96", false),
	rr("64:ff9b:1::/48", "local-use NAT64 64:ff9b:1::/48", false),
	rr("100::/64", "discard-only 100::/64", false),
	rr("2001::/32", "Teredo 2001::/32", false),
	rr("2001:2::/48", "benchmarking 2001:2::/48", false),
	rr("2001:10::/28", "deprecated ORCHID 2001:10::/28", false),
	rr("2001:db8::/32", "documentation 2001:db8::/32", false),
	rr("3fff::/20", "documentation 3fff::/20", false),
	rr("5f00::/16", "segment routing SIDs 5f00::/16", false),
	rr("fc00::/7", "unique-local fc00::/7", true),
	rr("fe80::/10", "link-local fe80::/10", true),
	rr("fec0::/10", "site-local fec0::/10", false),
	rr("ff00::/8", "multicast ff00::/8", false),
}

var (
	nat64Prefix  = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour    = netip.MustParsePrefix("2002::/16")
	compatPrefix = netip.MustParsePrefix("::/96")
)

// classify returns the always-denied range that holds a, or nil. a must be
// unmapped already. An IPv6 address embedding an IPv4 address (NAT64,
// 6to4, IPv4-compatible) is denied when the embedded address is, and the
// returned range is then marked non-openable.
func classify(a netip.Addr) *reservedRange {
	for i := range metadataRanges {
		if metadataRanges[i].prefix.Contains(a) {
			return &metadataRanges[i]
		}
	}
	if v4, how, ok := embedded(a); ok {
		if r := classify(v4); r != nil {
			return &reservedRange{prefix: r.prefix, name: how + " embedding " + r.name}
		}
	}
	for i := range reservedRanges {
		if reservedRanges[i].prefix.Contains(a) {
			return &reservedRanges[i]
		}
	}
	return nil
}

// embedded returns the IPv4 address carried inside an IPv6 NAT64 (RFC 6052
// well-known prefix), 6to4 (RFC 3056) or IPv4-compatible (RFC 4291,
// deprecated) address.
func embedded(a netip.Addr) (netip.Addr, string, bool) {
	if !a.Is6() {
		return netip.Addr{}, "", false
	}
	b := a.As16()
	switch {
	case nat64Prefix.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), "NAT64", true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4", true
	case compatPrefix.Contains(a) && binary.BigEndian.Uint32(b[12:16]) > 1:
		// ::0 and ::1 are the unspecified and loopback addresses, caught
		// by the ::/96 range itself.
		return netip.AddrFrom4([4]byte(b[12:16])), "IPv4-compatible", true
	}
	return netip.Addr{}, "", false
}
