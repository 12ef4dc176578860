// Package dnsgw answers the DNS queries of one sandbox. The sandbox's only
// DNS server is its network gateway (10.0.2.3:53 over UDP); the gateway
// hands every datagram to (*Server).Answer and sends back what it returns.
//
// DNS is the easiest way out of a sandbox that is not allowed out: a query
// for <data>.attacker.example reaches the attacker's authoritative server
// through any recursive resolver, and a TXT or NULL answer carries data
// back. The Server therefore answers only what an ordinary program needs to
// open a connection, and nothing else:
//
//   - Only standard queries (opcode QUERY) with exactly one question of
//     class IN, of at most MaxMessageSize bytes. Other opcodes get NOTIMP,
//     other classes REFUSED, larger messages and messages that do not parse
//     FORMERR, responses (QR set) and messages shorter than a header no
//     reply at all.
//   - Every name is decided by egress.Policy.AllowQuery on the policy
//     current at that moment: the deny and allow domain rules, the names
//     that are always denied (localhost, the metadata names), and the
//     bounds against tunnel-shaped names (long names, many labels, long
//     encoded-looking labels). A denied name gets REFUSED and never reaches
//     the upstream resolver.
//   - Only A and AAAA are resolved. Every other type (TXT, MX, NULL, ANY,
//     CNAME, SRV, PTR, HTTPS...) gets NOERROR with an empty answer section
//     ("no records of this type") and is never sent upstream. Those types
//     carry arbitrary bytes and are the usual tunnel carriers; an empty
//     NOERROR rather than REFUSED keeps resolvers that ask for HTTPS or MX
//     alongside A working, while nothing leaves and nothing comes back.
//   - Answers are flattened: A and AAAA records under the question name,
//     no CNAME chain, at most MaxAnswers records, each with the Server's
//     TTL, in a reply of at most MaxMessageSize bytes (records are dropped
//     to fit; TC is never set). EDNS options in a query are ignored and no
//     OPT record is sent, so a client cannot ask for large replies.
//   - Addresses are answered as resolved, reserved ones included: the
//     connection decision (egress.Policy.AllowConnection) refuses reserved
//     addresses later, with a reason the caller can log.
//
// Every answered address is recorded in a NameTable with the question
// name, so the gateway can later tell, for a connection to an address,
// which domain the client asked for (the domain AllowConnection checks
// against the allow domains).
//
// # Negative answers
//
// net.Resolver reports "no such name" and "no records of this type" with
// the same error (DNSError.IsNotFound). Answering NXDOMAIN to an AAAA query
// for a name that only has A records makes musl's getaddrinfo fail the
// whole lookup, so on IsNotFound the Server asks for the other address
// family and answers NXDOMAIN only when that is not found either; otherwise
// NOERROR with no records. Other upstream errors and timeouts get SERVFAIL.
//
// # Rates
//
// Each Server (one per sandbox) has a token bucket over every query it
// answers (Config.QueriesPerSecond, Config.Burst). The names AllowQuery
// accepts still leave the sandbox under allow_internet, each carrying up
// to a few dozen bytes; the rate bounds the bandwidth of such a channel,
// the load one sandbox puts on the shared upstream resolver, and the log
// and CPU cost of a flood. A query over the rate gets REFUSED. Log lines
// about refused and failed queries have their own, smaller rate.
package dnsgw
