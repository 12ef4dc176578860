package egress

import (
	"fmt"
	"net/netip"
	"strings"
)

// Decision is the answer to one question asked of a Policy.
type Decision struct {
	// Allow reports whether the connection, query or name is allowed.
	Allow bool
	// Reason names the rule or the check that decided, for logs and audit.
	Reason string
}

func allow(format string, args ...any) Decision {
	return Decision{Allow: true, Reason: fmt.Sprintf(format, args...)}
}

func deny(format string, args ...any) Decision {
	return Decision{Reason: fmt.Sprintf(format, args...)}
}

// AllowConnection decides a connection to dst:port. domain is the name the
// client asked for, as the gateway learnt it from its own DNS answer, the
// SNI or the Host header, or "" when the client connected to a raw address.
// The caller guarantees dst was in its own DNS answer for domain; this
// function only decides the policy. See the package doc for the order.
func (p *Policy) AllowConnection(dst netip.Addr, port uint16, domain string) Decision {
	if p == nil {
		p = denyAll
	}
	if !dst.IsValid() {
		return deny("invalid destination address")
	}
	if dst.Zone() != "" {
		return deny("destination %s has an IPv6 zone", dst)
	}
	dst = dst.Unmap()
	if port == 0 {
		return deny("port 0")
	}
	name := ""
	if domain != "" {
		n, err := normalizeName(domain, modeQuery)
		if err != nil {
			return deny("domain %.80q: %v", domain, err)
		}
		name = n
	}
	if d, decided := p.reserved(dst); decided {
		return d
	}
	if d, decided := p.denied(dst, port, name); decided {
		return d
	}
	if len(p.allow.ports) > 0 {
		if _, ok := matchPort(p.allow.ports, port); !ok {
			return deny("port %d not in allow.ports", port)
		}
	}
	if name != "" {
		if r, ok := matchDomain(p.allow.domains, name); ok {
			return allow("allow.domains %s", r)
		}
	}
	for _, c := range p.allow.cidrs {
		if c.Contains(dst) {
			return allow("allow.cidrs %s", c)
		}
	}
	if p.allowInternet {
		return allow("allow_internet")
	}
	return deny("no allow rule matches %s port %d and allow_internet is false", describe(dst, name), port)
}

// reserved applies step 1: the always-denied ranges and their exceptions.
func (p *Policy) reserved(dst netip.Addr) (Decision, bool) {
	r := classify(dst)
	if r == nil {
		return Decision{}, false
	}
	if r.openable {
		for _, c := range p.allow.cidrs {
			if c.Contains(dst) && c.Bits() >= r.prefix.Bits() && r.prefix.Contains(c.Addr()) {
				return Decision{}, false // opened explicitly; the rules below still apply
			}
		}
	}
	return deny("%s is %s (always denied)", dst, r.name), true
}

// denied applies step 2: the deny rules.
func (p *Policy) denied(dst netip.Addr, port uint16, name string) (Decision, bool) {
	if name != "" {
		if r, ok := matchDomain(p.deny.domains, name); ok {
			return deny("deny.domains %s", r), true
		}
	}
	for _, c := range p.deny.cidrs {
		if c.Contains(dst) {
			return deny("deny.cidrs %s", c), true
		}
	}
	if r, ok := matchPort(p.deny.ports, port); ok {
		return deny("deny.ports %s", r), true
	}
	return Decision{}, false
}

func describe(dst netip.Addr, name string) string {
	if name == "" {
		return dst.String()
	}
	return name + " (" + dst.String() + ")"
}

func matchDomain(rs []domainRule, name string) (domainRule, bool) {
	for _, r := range rs {
		if r.match(name) {
			return r, true
		}
	}
	return domainRule{}, false
}

func matchPort(rs []portRange, port uint16) (portRange, bool) {
	for _, r := range rs {
		if r.lo <= port && port <= r.hi {
			return r, true
		}
	}
	return portRange{}, false
}

// alwaysDeniedNames are names no sandbox may resolve through the gateway,
// whatever its policy: they name the host or the cloud it runs on.
var alwaysDeniedNames = []domainRule{
	{base: "localhost"}, {base: "localhost", wildcard: true},
	{base: "metadata"},
	{base: "metadata.google.internal"},
	{base: "metadata.goog"},
	{base: "instance-data"}, {base: "instance-data.ec2.internal"},
}

// AllowQuery decides a DNS query for name. Besides the domain rules it
// bounds the name against DNS tunnelling: at most MaxNameLen bytes,
// MaxLabelLen per label, MaxQueryLabels labels, and no label longer than
// MaxPlainLabelLen made only of [a-z0-9] (see MaxPlainLabelLen). Rates are
// the gateway's business, not this function's.
//
// Under allow_internet=false only names matching an allow domain resolve;
// CIDR rules do not make names resolvable, a client reaches them by address.
func (p *Policy) AllowQuery(name string) Decision {
	if p == nil {
		p = denyAll
	}
	n, err := normalizeName(name, modeQuery)
	if err != nil {
		return deny("query %.80q: %v", name, err)
	}
	if d, bad := tunnelShaped(n); bad {
		return d
	}
	if r, ok := matchDomain(alwaysDeniedNames, n); ok {
		return deny("query %s: %s is always denied", n, r)
	}
	if r, ok := matchDomain(p.deny.domains, n); ok {
		return deny("query %s: deny.domains %s", n, r)
	}
	if r, ok := matchDomain(p.allow.domains, n); ok {
		return allow("query %s: allow.domains %s", n, r)
	}
	if p.allowInternet {
		return allow("query %s: allow_internet", n)
	}
	return deny("query %s: no allow domain matches and allow_internet is false", n)
}

func tunnelShaped(n string) (Decision, bool) {
	if c := strings.Count(n, ".") + 1; c > MaxQueryLabels {
		return deny("query %.80q: %d labels, more than %d (DNS tunnel bound)", n, c, MaxQueryLabels), true
	}
	for _, l := range strings.Split(n, ".") {
		if len(l) > MaxPlainLabelLen && plainAlnum(l) {
			return deny("query %.80q: label of %d letters and digits looks like encoded data (DNS tunnel bound)", n, len(l)), true
		}
	}
	return Decision{}, false
}

func plainAlnum(l string) bool {
	for i := 0; i < len(l); i++ {
		if c := l[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
