package e2bapi

// E2B's egress controls (network.allowOut / network.denyOut on create, PUT
// /sandboxes/{id}/network for sbx.updateNetwork), mapped onto SPACE's
// egress policy (internal/egress, docs/network.md).
//
// E2B's rules: allowOut holds CIDRs, addresses and domain names
// ("example.com", "*.example.com"); denyOut holds CIDRs and addresses only;
// an entry of allowOut beats one of denyOut; allow_internet_access false is
// denyOut ["0.0.0.0/0"] (ALL_TRAFFIC); a domain in allowOut needs
// ALL_TRAFFIC in denyOut (domains are an allowlist); without denyOut
// everything is allowed. SPACE decides deny rules before allow rules, so
// the mapping turns E2B's precedence into a policy that decides the same:
//
//   - ALL_TRAFFIC denied: allow_internet false and allowOut as the allow
//     rules. The rest of denyOut adds nothing (what is not allowed is
//     denied, and an allowed entry beats a denied one), so it is not kept.
//   - ALL_TRAFFIC in allowOut: everything allowed (allow_internet true, no
//     deny rule), whatever denyOut says.
//   - otherwise: allow_internet true, denyOut as deny CIDRs with every
//     allowOut CIDR cut out of them (so that the allowed part stays
//     reachable), and allowOut also as allow CIDRs, which is how SPACE opens
//     a private range on purpose.
//
// Rules (header transforms), egressProxy, dnsServers and httpsPorts have no SPACE
// counterpart and are refused by name, never dropped (e2bRefusedNetwork);
// maskRequestHost is the ports' rule (hostmask.go).

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
)

// e2bAllTraffic is E2B's ALL_TRAFFIC: every destination.
const e2bAllTraffic = "0.0.0.0/0"

// e2bEgressRequest is the egress part of E2B's SandboxNetworkConfig (on
// create, under network) and its SandboxNetworkUpdateConfig (the body of
// PUT /sandboxes/{id}/network, which also carries allow_internet_access).
type e2bEgressRequest struct {
	AllowOut            []string        `json:"allowOut"`
	DenyOut             []string        `json:"denyOut"`
	AllowInternetAccess *bool           `json:"allow_internet_access"`
	Rules               json.RawMessage `json:"rules"`
	EgressProxy         json.RawMessage `json:"egressProxy"`
	DNSServers          json.RawMessage `json:"dnsServers"`
}

// refused names the first field of an updateNetwork body that SPACE cannot
// honour (nil when it asks for none of them): each is refused by name,
// never dropped.
func (req *e2bEgressRequest) refused() error {
	for _, f := range []struct {
		name string
		v    json.RawMessage
	}{{"egressProxy", req.EgressProxy}, {"dnsServers", req.DNSServers}} {
		if len(f.v) > 0 && !isJSONEmpty(f.v) {
			return e2bRefusedNetwork(f.name)
		}
	}
	return nil
}

// e2bEgressFields reads allowOut and denyOut of a create's network field
// (already checked to be an object or empty by parseE2BNetwork): set false
// when it names neither, so the sandbox keeps its template's policy.
func e2bEgressFields(raw json.RawMessage) (allowOut, denyOut []string, set bool, err error) {
	if isJSONEmpty(raw) || len(raw) == 0 {
		return nil, nil, false, nil
	}
	var req struct {
		AllowOut *[]string `json:"allowOut"`
		DenyOut  *[]string `json:"denyOut"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, nil, false, fmt.Errorf("%w: network.allowOut and network.denyOut: want lists of strings: %v", errdefs.ErrInvalidArgument, err)
	}
	if req.AllowOut != nil {
		allowOut = *req.AllowOut
	}
	if req.DenyOut != nil {
		denyOut = *req.DenyOut
	}
	return allowOut, denyOut, len(allowOut) > 0 || len(denyOut) > 0, nil
}

// e2bCreateEgress is the policy of an E2B create: nil when the create
// names no egress control at all (the template's or server's default
// applies, or allow_internet_access alone as before).
func e2bCreateEgress(network json.RawMessage, allowInternetAccess *bool) (*egress.Policy, error) {
	allowOut, denyOut, set, err := e2bEgressFields(network)
	if err != nil || !set {
		return nil, err
	}
	return e2bEgressPolicy(allowOut, denyOut, allowInternetAccess)
}

// e2bEgressPolicy maps E2B's allowOut, denyOut and allow_internet_access
// (nil: not sent) onto a SPACE policy (the package comment above says how).
// Errors are InvalidArgument and name the E2B field and entry.
func e2bEgressPolicy(allowOut, denyOut []string, allowInternetAccess *bool) (*egress.Policy, error) {
	if n := len(allowOut) + len(denyOut); n > egress.MaxRules {
		return nil, fmt.Errorf("%w: network: %d allowOut and denyOut entries, more than %d; use wider CIDRs or wildcards", errdefs.ErrInvalidArgument, n, egress.MaxRules)
	}
	var allowAll, denyAll bool
	var allowCIDRs []netip.Prefix
	var domainNames []string
	for i, e := range allowOut {
		if pfx, ok, err := e2bPrefix("allowOut", i, e); err != nil {
			return nil, err
		} else if ok && pfx.String() == e2bAllTraffic {
			allowAll = true
			continue
		} else if ok {
			allowCIDRs = append(allowCIDRs, pfx)
			continue
		}
		d := strings.ToLower(e) // E2B keeps domains in lowercase
		if _, err := egress.NewPolicy(egress.Spec{Allow: egress.RuleSet{Domains: []string{d}}}); err != nil {
			return nil, fmt.Errorf("%w: network.allowOut[%d] %q: not a CIDR, an address or a domain name (example.com, *.example.com; punycode for international names)",
				errdefs.ErrInvalidArgument, i, service.Clip(e))
		}
		domainNames = append(domainNames, d)
	}
	var denyCIDRs []netip.Prefix
	for i, e := range denyOut {
		pfx, ok, err := e2bPrefix("denyOut", i, e)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: network.denyOut[%d] %q: domain names are not supported in denyOut (as on E2B); list CIDRs or addresses, or deny %s and list the allowed domains in allowOut",
				errdefs.ErrInvalidArgument, i, service.Clip(e), e2bAllTraffic)
		}
		if pfx.String() == e2bAllTraffic {
			denyAll = true
			continue
		}
		if !slices.Contains(denyCIDRs, pfx) { // a repeated entry would be cut again
			denyCIDRs = append(denyCIDRs, pfx)
		}
	}
	if allowInternetAccess != nil && !*allowInternetAccess {
		denyAll = true
	}
	if len(domainNames) > 0 && !denyAll && !allowAll {
		return nil, fmt.Errorf("%w: network.allowOut lists domain %q, which needs all other traffic denied: add %q (ALL_TRAFFIC) to denyOut, as E2B requires",
			errdefs.ErrInvalidArgument, service.Clip(domainNames[0]), e2bAllTraffic)
	}
	var spec egress.Spec
	switch {
	case allowAll:
		spec.AllowInternet = true
	case denyAll:
		spec.Allow = egress.RuleSet{Domains: domainNames, CIDRs: prefixStrings(allowCIDRs)}
	default:
		spec.AllowInternet = true
		spec.Allow.CIDRs = prefixStrings(allowCIDRs)
		// Each cut adds at most 127 prefixes to each denied prefix that
		// contains the allowed one: bounded at every step, so that a body
		// of many overlapping entries cannot grow it without end.
		for _, a := range allowCIDRs {
			if denyCIDRs = subtractPrefix(denyCIDRs, a); len(denyCIDRs) > egress.MaxRules {
				return nil, fmt.Errorf("%w: network: cutting the allowOut CIDRs out of denyOut makes more than %d denied CIDRs; deny %s and list what is allowed instead",
					errdefs.ErrInvalidArgument, egress.MaxRules, e2bAllTraffic)
			}
		}
		spec.Deny.CIDRs = prefixStrings(denyCIDRs)
	}
	p, err := egress.NewPolicy(spec)
	if err != nil {
		if errors.Is(err, errdefs.ErrInvalidArgument) {
			return nil, fmt.Errorf("%w: network: allowOut and denyOut make an egress policy SPACE refuses (%v)", errdefs.ErrInvalidArgument, err)
		}
		return nil, err
	}
	return p, nil
}

// e2bPrefix reads entry i of list as a CIDR or an address: ok false when
// it is neither (a domain name, for allowOut).
func e2bPrefix(list string, i int, e string) (pfx netip.Prefix, ok bool, err error) {
	if strings.Contains(e, "/") {
		pfx, err := netip.ParsePrefix(e)
		if err != nil {
			return netip.Prefix{}, false, fmt.Errorf("%w: network.%s[%d] %q: not a CIDR (want 10.0.0.0/8 or 8.8.8.8/32)", errdefs.ErrInvalidArgument, list, i, service.Clip(e))
		}
		if m := pfx.Masked(); m != pfx {
			return netip.Prefix{}, false, fmt.Errorf("%w: network.%s[%d] %q: has host bits set; did you mean %s", errdefs.ErrInvalidArgument, list, i, service.Clip(e), m)
		}
		if pfx.Addr().Is4In6() || pfx.Addr().Zone() != "" {
			return netip.Prefix{}, false, fmt.Errorf("%w: network.%s[%d] %q: write an IPv4 CIDR in its IPv4 form, without a zone", errdefs.ErrInvalidArgument, list, i, service.Clip(e))
		}
		return pfx, true, nil
	}
	a, err := netip.ParseAddr(e)
	if err != nil {
		return netip.Prefix{}, false, nil
	}
	if a.Is4In6() || a.Zone() != "" {
		return netip.Prefix{}, false, fmt.Errorf("%w: network.%s[%d] %q: write an IPv4 address in its IPv4 form, without a zone", errdefs.ErrInvalidArgument, list, i, service.Clip(e))
	}
	return netip.PrefixFrom(a, a.BitLen()), true, nil
}

func prefixStrings(ps []netip.Prefix) []string {
	var out []string
	for _, p := range ps {
		if s := p.String(); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// subtractPrefix returns the prefixes covering what ps cover outside a.
func subtractPrefix(ps []netip.Prefix, a netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, d := range ps {
		switch {
		case !d.Overlaps(a):
			out = append(out, d)
		case a.Bits() <= d.Bits():
			// a covers d: nothing of d is left.
		default:
			// d covers a: d without a is, for each length from d's
			// to a's, the sibling of a's prefix at that length.
			for l := d.Bits() + 1; l <= a.Bits(); l++ {
				out = append(out, siblingPrefix(netip.PrefixFrom(a.Addr(), l).Masked()))
			}
		}
	}
	return out
}

// siblingPrefix is p with the last bit of its prefix flipped.
func siblingPrefix(p netip.Prefix) netip.Prefix {
	b := p.Addr().AsSlice()
	bit := p.Bits() - 1
	b[bit/8] ^= 0x80 >> (bit % 8)
	a, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(a, p.Bits())
}

// e2bNetworkOf is what E2B's getInfo says of p: allowOut and denyOut as
// E2B lists them (a policy set through SPACE's own API may hold what E2B
// cannot say, deny domains and port rules: those are not listed).
func e2bNetworkOf(p *egress.Policy) (allowOut, denyOut []string) {
	s := p.Spec()
	allowOut = append(append(allowOut, s.Allow.CIDRs...), s.Allow.Domains...)
	if !s.AllowInternet {
		return allowOut, []string{e2bAllTraffic}
	}
	return allowOut, s.Deny.CIDRs
}

// handleE2BUpdateNetwork is PUT /sandboxes/{id}/network
// (sbx.updateNetwork): the body replaces the sandbox's egress rules, a
// field left out is cleared (so {} allows everything), and the running
// execution gets the new policy at once (service.Sandboxes.SetEgress).
// 204 on success.
func (a *API) handleE2BUpdateNetwork(w http.ResponseWriter, r *http.Request) {
	var req e2bEgressRequest
	if err := decodeE2B(w, r, &req); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	rules, err := parseE2BRules(req.Rules)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if err := req.refused(); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	p, err := e2bEgressPolicy(req.AllowOut, req.DenyOut, req.AllowInternetAccess)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	c := a.host.Caller(r.Context())
	sb, err := a.sandboxFor(r)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if e2bState(sb.State) == "" {
		a.writeE2BErr(w, r, fmt.Errorf("%w: sandbox %s is %s", errdefs.ErrNotFound, sb.ID, sb.State))
		return
	}
	if err := a.svc.SetEgress(r.Context(), c, sb.ID, p); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	// Rules left out are cleared, as every field of the body is.
	if err := a.e2bSetRules(r.Context(), c, sb, rules, false); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bEgressJSON is p as a create's egress field: nil for none.
func e2bEgressJSON(p *egress.Policy) json.RawMessage {
	if p == nil {
		return nil
	}
	return sandbox.EgressJSON(p)
}

// errE2BSnapshotEgress refuses allowOut/denyOut on a create from a
// snapshot: SPACE's fork starts the child with the policy of the
// snapshot's sandbox, and a policy set after it started would leave it a
// moment with the wrong one.
var errE2BSnapshotEgress = fmt.Errorf("%w: network.allowOut and network.denyOut are not supported on a create from a snapshot yet "+
	"(the sandbox starts with the policy of the snapshot's sandbox); create it without them and call updateNetwork", errdefs.ErrInvalidArgument)
