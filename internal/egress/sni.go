package egress

import (
	"net/netip"
	"strings"
)

// CheckSNI decides whether a TLS ClientHello's server name fits the
// connection. connDomain is the domain the connection was allowed for
// (the domain passed to AllowConnection), or "" for a raw-address
// connection. When connDomain is set, the SNI must name the same domain
// (ASCII case and a trailing dot ignored) and may not be absent; otherwise
// a client could resolve an allowed name and then talk to any virtual host
// behind the same address. When connDomain is "", an SNI is only checked
// against the deny domains.
func (p *Policy) CheckSNI(connDomain, sni string) Decision {
	return p.checkName("SNI", connDomain, sni)
}

// CheckHost is CheckSNI for an HTTP Host header (or an HTTP/2 :authority).
// A port in host ("example.com:8080", "[2001:db8::1]:80") is ignored; an
// address literal never matches a domain.
func (p *Policy) CheckHost(connDomain, host string) Decision {
	return p.checkName("Host", connDomain, stripPort(host))
}

func (p *Policy) checkName(what, connDomain, got string) Decision {
	if p == nil {
		p = denyAll
	}
	if connDomain == "" {
		if got == "" {
			return allow("%s absent on a raw-address connection", what)
		}
		if _, err := netip.ParseAddr(got); err == nil {
			return allow("%s %s is an address on a raw-address connection", what, got)
		}
		n, err := normalizeName(got, modeQuery)
		if err != nil {
			return deny("%s %.80q: %v", what, got, err)
		}
		if r, ok := matchDomain(p.deny.domains, n); ok {
			return deny("%s %s: deny.domains %s", what, n, r)
		}
		return allow("%s %s on a raw-address connection", what, n)
	}
	want, err := normalizeName(connDomain, modeQuery)
	if err != nil {
		return deny("connection domain %.80q: %v", connDomain, err)
	}
	if got == "" {
		return deny("%s absent; connection was allowed for %s", what, want)
	}
	n, err := normalizeName(got, modeQuery)
	if err != nil {
		return deny("%s %.80q: %v", what, got, err)
	}
	if n != want {
		return deny("%s %s does not match %s, the domain the connection was allowed for", what, n, want)
	}
	return allow("%s matches %s", what, want)
}

// stripPort removes a trailing :port from an HTTP host and the brackets
// around an IPv6 literal.
func stripPort(host string) string {
	if strings.HasPrefix(host, "[") {
		if end := strings.IndexByte(host, ']'); end > 0 {
			return host[1:end]
		}
		return host
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.Count(host, ":") == 1 {
		return host[:i]
	}
	return host
}
