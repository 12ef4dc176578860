package egress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Bounds on a policy; a policy comes from a tenant and is hostile input.
const (
	// MaxPolicyBytes is the largest JSON policy ParsePolicy reads.
	MaxPolicyBytes = 256 << 10
	// MaxRules is the most rules (domains, CIDRs and ports of both lists
	// together) a policy may have.
	MaxRules = 1000
)

// Spec is the JSON form of a policy, as stored and sent over the API:
//
//	{
//	  "allow_internet": false,
//	  "allow": {"domains": ["api.example.com", "*.pypi.org"], "cidrs": ["203.0.113.0/24"], "ports": ["443", "8000-8100"]},
//	  "deny":  {"domains": ["evil.example.com"], "cidrs": ["2001:db8::/32"], "ports": ["25"]}
//	}
type Spec struct {
	// AllowInternet is the default for a connection no rule decides: true
	// allows it, false denies it (E2B's allow_internet_access=false).
	AllowInternet bool `json:"allow_internet"`
	// Allow lists what is allowed; Deny what is denied before Allow is
	// consulted.
	Allow RuleSet `json:"allow"`
	Deny  RuleSet `json:"deny"`
}

// RuleSet is one list of rules.
type RuleSet struct {
	// Domains are exact names ("example.com") or wildcards
	// ("*.example.com": strict subdomains at any depth, not the apex), in
	// lowercase ASCII; internationalised names in punycode.
	Domains []string `json:"domains,omitempty"`
	// CIDRs are IPv4 or IPv6 prefixes without host bits ("10.1.0.0/16"),
	// or single addresses.
	CIDRs []string `json:"cidrs,omitempty"`
	// Ports are single ports ("443") or inclusive ranges ("8000-8100").
	// In Allow they are a filter: when non-empty, any other port is denied.
	Ports []string `json:"ports,omitempty"`
}

// Policy is a validated, immutable egress policy. Build it with ParsePolicy
// or NewPolicy; a live update builds a new one (see Holder). The zero
// Policy denies everything.
type Policy struct {
	spec          Spec
	allowInternet bool
	allow, deny   rules
}

type rules struct {
	domains []domainRule
	cidrs   []netip.Prefix
	ports   []portRange
}

type portRange struct{ lo, hi uint16 }

func (r portRange) String() string {
	if r.lo == r.hi {
		return strconv.Itoa(int(r.lo))
	}
	return fmt.Sprintf("%d-%d", r.lo, r.hi)
}

// ParsePolicy decodes and validates a JSON policy (see Spec). Unknown
// fields are errors, so a misspelt "alow" cannot silently widen a policy.
// Errors are of class errdefs.ErrInvalidArgument and name the bad entry.
func ParsePolicy(b []byte) (*Policy, error) {
	if len(b) > MaxPolicyBytes {
		return nil, fmt.Errorf("egress policy: %d bytes, more than %d: %w", len(b), MaxPolicyBytes, errdefs.ErrInvalidArgument)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("egress policy: decode JSON: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("egress policy: trailing data after the JSON object: %w", errdefs.ErrInvalidArgument)
	}
	return NewPolicy(s)
}

// NewPolicy validates s and returns the Policy it describes. s is copied;
// changing it afterwards does not change the Policy.
func NewPolicy(s Spec) (*Policy, error) {
	n := len(s.Allow.Domains) + len(s.Allow.CIDRs) + len(s.Allow.Ports) +
		len(s.Deny.Domains) + len(s.Deny.CIDRs) + len(s.Deny.Ports)
	if n > MaxRules {
		return nil, fmt.Errorf("egress policy: %d rules, more than %d; use wildcards or wider CIDRs: %w", n, MaxRules, errdefs.ErrInvalidArgument)
	}
	p := &Policy{allowInternet: s.AllowInternet}
	var err error
	if p.allow, err = compileRules("allow", s.Allow, true); err != nil {
		return nil, err
	}
	if p.deny, err = compileRules("deny", s.Deny, false); err != nil {
		return nil, err
	}
	p.spec = Spec{AllowInternet: s.AllowInternet, Allow: s.Allow.clone(), Deny: s.Deny.clone()}
	return p, nil
}

// Spec returns a copy of the policy's JSON form.
func (p *Policy) Spec() Spec {
	if p == nil {
		return Spec{}
	}
	return Spec{AllowInternet: p.spec.AllowInternet, Allow: p.spec.Allow.clone(), Deny: p.spec.Deny.clone()}
}

func (rs RuleSet) clone() RuleSet {
	return RuleSet{
		Domains: append([]string(nil), rs.Domains...),
		CIDRs:   append([]string(nil), rs.CIDRs...),
		Ports:   append([]string(nil), rs.Ports...),
	}
}

func compileRules(list string, rs RuleSet, allow bool) (rules, error) {
	var r rules
	for i, d := range rs.Domains {
		dr, err := parseDomainRule(d, allow)
		if err != nil {
			return rules{}, invalid(list, "domains", i, d, err)
		}
		r.domains = append(r.domains, dr)
	}
	for i, c := range rs.CIDRs {
		pfx, err := parseCIDR(c)
		if err != nil {
			return rules{}, invalid(list, "cidrs", i, c, err)
		}
		r.cidrs = append(r.cidrs, pfx)
	}
	for i, s := range rs.Ports {
		pr, err := parsePorts(s)
		if err != nil {
			return rules{}, invalid(list, "ports", i, s, err)
		}
		r.ports = append(r.ports, pr)
	}
	return r, nil
}

func invalid(list, field string, i int, v string, err error) error {
	if len(v) > 80 {
		v = v[:80] + "..."
	}
	return fmt.Errorf("egress policy: %s.%s[%d] %q: %v: %w", list, field, i, v, err, errdefs.ErrInvalidArgument)
}

func parseCIDR(s string) (netip.Prefix, error) {
	var pfx netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if pfx, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, fmt.Errorf("not a CIDR prefix (want 10.0.0.0/8 or 2001:db8::/32)")
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("not an address or a CIDR prefix (want 10.0.0.0/8 or 2001:db8::/32)")
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("has an IPv6 zone; zones have no meaning in a policy")
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	if pfx.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("is an IPv4-mapped IPv6 prefix; write the IPv4 form")
	}
	if m := pfx.Masked(); m != pfx {
		return netip.Prefix{}, fmt.Errorf("has host bits set; did you mean %s", m)
	}
	return pfx, nil
}

func parsePorts(s string) (portRange, error) {
	loS, hiS, isRange := strings.Cut(s, "-")
	lo, err := parsePort(loS)
	if err != nil {
		return portRange{}, err
	}
	if !isRange {
		return portRange{lo, lo}, nil
	}
	hi, err := parsePort(hiS)
	if err != nil {
		return portRange{}, err
	}
	if lo > hi {
		return portRange{}, fmt.Errorf("range is backwards; write %d-%d", hi, lo)
	}
	return portRange{lo, hi}, nil
}

func parsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 || !allDigits(s) {
		return 0, fmt.Errorf("%q is not a port number (want 1-65535, or a range like 8000-8100)", s)
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %d out of range 1-65535", n)
	}
	return uint16(n), nil
}
