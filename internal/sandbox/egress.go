package sandbox

import (
	"encoding/json"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/egress"
)

// DefaultEgress returns the built-in egress policy of a sandbox created
// without one, when the server has no --default-egress: the public internet,
// nothing else. The egress package denies loopback, private, link-local and
// metadata addresses before any rule is read.
func DefaultEgress() *egress.Policy {
	p, err := egress.NewPolicy(egress.Spec{AllowInternet: true})
	if err != nil {
		panic("sandbox: the built-in egress policy must be valid: " + err.Error())
	}
	return p
}

// EgressOr returns the sandbox's egress policy, or def when it has none: a
// sandbox recorded before sandboxes had egress policies follows the control
// plane's default (see docs/network.md).
func (sb *Sandbox) EgressOr(def *egress.Policy) *egress.Policy {
	if sb.Egress != nil {
		return sb.Egress
	}
	return def
}

// EgressJSON returns p in its JSON form (egress.Spec), as it is stored and
// sent to nodes. A nil p is the zero policy, which denies everything.
func EgressJSON(p *egress.Policy) json.RawMessage {
	b, err := json.Marshal(p.Spec())
	if err != nil {
		// A Spec holds only a bool and string slices.
		panic("sandbox: marshal egress spec: " + err.Error())
	}
	return b
}

// EgressAPI returns p as the REST API reports it.
func EgressAPI(p *egress.Policy) *sandboxv1.EgressPolicy {
	s := p.Spec()
	return &sandboxv1.EgressPolicy{
		AllowInternet: s.AllowInternet,
		Allow:         rulesAPI(s.Allow),
		Deny:          rulesAPI(s.Deny),
	}
}

func rulesAPI(rs egress.RuleSet) sandboxv1.EgressRules {
	return sandboxv1.EgressRules{Domains: nilIfEmpty(rs.Domains), CIDRs: nilIfEmpty(rs.CIDRs), Ports: nilIfEmpty(rs.Ports)}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// CreateEgress returns the egress policy of a create request: raw is the
// request's "egress" (absent or JSON null: none), allowInternetAccess its
// E2B shorthand "allow_internet_access", def the server's default. raw is
// parsed strictly by egress.ParsePolicy; its errors, and a shorthand that
// contradicts raw, are of class ErrInvalidArgument.
func CreateEgress(raw json.RawMessage, allowInternetAccess *bool, def *egress.Policy) (*egress.Policy, error) {
	if len(raw) == 0 || string(raw) == "null" {
		if allowInternetAccess == nil {
			return def, nil
		}
		return egress.NewPolicy(egress.Spec{AllowInternet: *allowInternetAccess})
	}
	p, err := egress.ParsePolicy(raw)
	if err != nil {
		return nil, err
	}
	if allowInternetAccess != nil && *allowInternetAccess != p.Spec().AllowInternet {
		return nil, invalid("allow_internet_access %t contradicts egress.allow_internet %t; send one of them", *allowInternetAccess, p.Spec().AllowInternet)
	}
	return p, nil
}
