// Package egress owns the per-sandbox egress policy: its JSON form, its
// validation, and the pure decisions the network gateway asks of it for every
// connection, every DNS query and every TLS SNI or HTTP Host it sees.
//
// The package does no I/O. The gateway resolves names with its own resolver,
// learns which domain a connection was made for (from its DNS answer, the
// SNI or the Host header), and asks:
//
//	d := holder.Load().AllowConnection(dst, port, domain)
//	if !d.Allow { refuse; log d.Reason }
//
// # Order of a connection decision
//
//  1. Always-denied addresses (see reserved.go): loopback, RFC 1918, CGNAT,
//     link-local, unique-local, multicast, unspecified, broadcast, reserved
//     and documentation ranges, the cloud metadata addresses, and the same
//     addresses hidden inside IPv4-compatible, NAT64 (64:ff9b::/96) and 6to4
//     (2002::/16) IPv6 forms. IPv4-mapped addresses (::ffff:a.b.c.d) are
//     unmapped first and decided exactly as their IPv4 form.
//  2. Deny rules: domains, CIDRs, ports.
//  3. The allow port filter: when allow.ports is non-empty, any other port is
//     denied, including under AllowInternet.
//  4. Allow rules: a domain rule matches only when the connection was made
//     for that domain; a CIDR rule matches the destination address.
//  5. The default: AllowInternet (E2B's allow_internet_access).
//
// # Opening a private range
//
// A CIDR allow rule lifts step 1 only when the rule lies entirely inside
// one openable reserved range (RFC 1918, CGNAT, link-local, unique-local,
// benchmarking): "10.1.0.0/16" opens 10.1.2.3, but "0.0.0.0/0" or
// "8.0.0.0/5" do not, although they cover private space. A rule has to be
// about private space to open it; a broad rule cannot open it by accident.
// Loopback, unspecified, multicast, broadcast, the metadata addresses and
// the embedded IPv6 forms (NAT64, 6to4, IPv4-compatible, Teredo) are never
// openable: nothing a sandbox should reach lives there.
//
// # Updates
//
// A Policy is immutable once built. A live update builds a new Policy and
// swaps it into a Holder; connections already decided keep their decision.
package egress
