package egress

import (
	"errors"
	"fmt"
	"strings"
)

// Limits on DNS names (RFC 1035) and on names that look like a DNS tunnel.
const (
	// MaxNameLen is the longest name accepted, without the trailing dot.
	MaxNameLen = 253
	// MaxLabelLen is the longest label accepted.
	MaxLabelLen = 63
	// MaxQueryLabels is the most labels a DNS query name may have.
	// Legitimate names rarely pass five; tunnels stack many labels of data.
	MaxQueryLabels = 10
	// MaxPlainLabelLen is the longest label made only of [a-z0-9] that a
	// query may carry. Encoders (base32, hex, base36) emit long runs of
	// exactly these characters and no hyphen; real hostnames with a label
	// over 40 characters and no hyphen are rare enough that refusing them
	// is the conservative side. Labels with a hyphen or an underscore and
	// punycode (xn--) labels are not refused by this heuristic.
	MaxPlainLabelLen = 40
)

// nameMode says which spelling a name may use.
type nameMode int

const (
	// modePolicy is a name written in a policy: lowercase ASCII LDH only.
	modePolicy nameMode = iota
	// modeQuery is a name seen on the wire (DNS question, SNI, Host): ASCII
	// case is folded (resolvers randomise it, RFC 5452 "0x20") and
	// underscore labels (SRV, _dmarc) are accepted.
	modeQuery
)

// normalizeName validates name and returns it lowercased without a trailing
// dot.
func normalizeName(name string, mode nameMode) (string, error) {
	name = strings.TrimSuffix(name, ".")
	if name == "" {
		return "", errors.New("empty name")
	}
	if len(name) > MaxNameLen {
		return "", fmt.Errorf("name is %d bytes, longer than %d", len(name), MaxNameLen)
	}
	if mode == modeQuery {
		name = asciiLower(name)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if err := checkLabel(l, mode); err != nil {
			return "", err
		}
	}
	if allDigits(labels[len(labels)-1]) {
		return "", errors.New("last label is numeric: an IP address is not a domain name; use cidrs for addresses")
	}
	return name, nil
}

func checkLabel(l string, mode nameMode) error {
	if l == "" {
		return errors.New("empty label (two dots in a row or a leading dot)")
	}
	if len(l) > MaxLabelLen {
		return fmt.Errorf("label %.20q... is %d bytes, longer than %d", l, len(l), MaxLabelLen)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-':
		case c == '_' && mode == modeQuery:
		case c >= 'A' && c <= 'Z':
			return fmt.Errorf("label %q has uppercase letters: write names in lowercase", l)
		case c >= 0x80:
			return fmt.Errorf("label %q is not ASCII: write internationalised names in punycode (xn--...)", l)
		default:
			return fmt.Errorf("label %q has character %q: only letters, digits and hyphens are allowed", l, c)
		}
	}
	if l[0] == '-' || l[len(l)-1] == '-' {
		return fmt.Errorf("label %q starts or ends with a hyphen", l)
	}
	if len(l) >= 4 && l[2:4] == "--" && l[:2] != "xn" {
		return fmt.Errorf("label %q has hyphens in positions 3 and 4, reserved for xn-- (punycode)", l)
	}
	if l == "xn--" {
		return fmt.Errorf("label %q is an empty punycode label", l)
	}
	return nil
}

func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(s) // only ASCII matters; non-ASCII is refused later
		}
	}
	return s
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// domainRule is one validated domain pattern.
type domainRule struct {
	// base is the name without a "*." prefix.
	base string
	// wildcard means the rule matches strict subdomains of base only,
	// at any depth, and not base itself.
	wildcard bool
}

func (r domainRule) String() string {
	if r.wildcard {
		return "*." + r.base
	}
	return r.base
}

// match reports whether the normalized name matches r.
func (r domainRule) match(name string) bool {
	if !r.wildcard {
		return name == r.base
	}
	return len(name) > len(r.base)+1 && strings.HasSuffix(name, r.base) && name[len(name)-len(r.base)-1] == '.'
}

// parseDomainRule validates a policy domain pattern. A wildcard in an allow
// rule must leave at least two labels ("*.example.com", "*.co.uk"): "*.com"
// would open a whole top-level domain, which is almost always a mistake, so
// it is refused. Deny rules may be that broad ("*.zip"), since over-denying
// is safe.
func parseDomainRule(s string, allow bool) (domainRule, error) {
	r := domainRule{base: s}
	if strings.HasPrefix(s, "*.") {
		r = domainRule{base: s[2:], wildcard: true}
	}
	if strings.Contains(r.base, "*") {
		return domainRule{}, errors.New(`a wildcard must be the whole first label, as in "*.example.com"`)
	}
	base, err := normalizeName(r.base, modePolicy)
	if err != nil {
		return domainRule{}, err
	}
	r.base = base
	if !strings.Contains(base, ".") {
		if r.wildcard && allow {
			return domainRule{}, fmt.Errorf("%q would allow a whole top-level domain; name the domain (*.example.%s)", s, base)
		}
		if !r.wildcard {
			return domainRule{}, fmt.Errorf("%q is a single label; name a fully qualified domain", s)
		}
	}
	return r, nil
}
