package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
)

// The deployment's own services (control-plane replicas, the database, the
// object store, every node's API) often have addresses that are neither
// private nor reserved, so step 1 of a decision does not catch them and a
// sandbox allowed the internet would reach them. The control plane lists
// them (with every heartbeat answer) and each gateway refuses them before
// any policy is asked: no allow rule, not even a CIDR naming one of them
// exactly, opens them. Denial is by address and prefix, every port.

// MaxInternalPrefixes bounds an internal-service list: a larger one is
// refused rather than searched linearly on every connection.
const MaxInternalPrefixes = 4096

// InternalSet is one version of the deployment's internal-service
// addresses. It is immutable; a newer list is a new InternalSet.
type InternalSet struct {
	version  uint64
	prefixes []netip.Prefix // masked, IPv4 as IPv4, sorted, no duplicates
	// byLen indexes prefixes by length, so that a lookup costs one map
	// probe per distinct length (a few), not a scan of the list.
	byLen        map[int]map[netip.Prefix]struct{}
	lens4, lens6 []int // the distinct lengths of IPv4 and IPv6 prefixes
}

// NewInternalSet builds version of the list from prefixes. IPv4-mapped
// prefixes (::ffff:a.b.c.d/n, n >= 96) are kept in their IPv4 form, so
// that a connection is matched whichever way either side writes IPv4.
func NewInternalSet(version uint64, prefixes []netip.Prefix) (*InternalSet, error) {
	if len(prefixes) > MaxInternalPrefixes {
		return nil, fmt.Errorf("internal-service list: %d prefixes, more than %d", len(prefixes), MaxInternalPrefixes)
	}
	out := make([]netip.Prefix, 0, len(prefixes))
	for _, p := range prefixes {
		n, err := normalizeInternal(p)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	set := &InternalSet{version: version, prefixes: slices.Compact(out), byLen: map[int]map[netip.Prefix]struct{}{}}
	for _, p := range set.prefixes {
		key := p.Bits()
		if p.Addr().Is6() {
			key += 1000 // IPv6 lengths apart from IPv4's
		}
		m := set.byLen[key]
		if m == nil {
			m = map[netip.Prefix]struct{}{}
			set.byLen[key] = m
			if p.Addr().Is4() {
				set.lens4 = append(set.lens4, p.Bits())
			} else {
				set.lens6 = append(set.lens6, p.Bits())
			}
		}
		m[p] = struct{}{}
	}
	return set, nil
}

func normalizeInternal(p netip.Prefix) (netip.Prefix, error) {
	if !p.IsValid() {
		return netip.Prefix{}, errors.New("internal-service list: an invalid prefix")
	}
	a := p.Addr()
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("internal-service list: %s has an IPv6 zone", p)
	}
	bits := p.Bits()
	if a.Is4In6() {
		if bits < 96 {
			return netip.Prefix{}, fmt.Errorf("internal-service list: %s covers more than the IPv4-mapped range", p)
		}
		a, bits = a.Unmap(), bits-96
	}
	return netip.PrefixFrom(a, bits).Masked(), nil
}

// ParseInternalCIDRs parses the textual prefixes of an internal-service
// list as the control plane sends them: "a.b.c.d/n", "x::/n", or a bare
// address for one host.
func ParseInternalCIDRs(version uint64, cidrs []string) (*InternalSet, error) {
	if len(cidrs) > MaxInternalPrefixes {
		return nil, fmt.Errorf("internal-service list: %d entries, more than %d", len(cidrs), MaxInternalPrefixes)
	}
	ps := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := ParseInternalCIDR(c)
		if err != nil {
			return nil, fmt.Errorf("internal-service list: %w", err)
		}
		ps = append(ps, p)
	}
	return NewInternalSet(version, ps)
}

// ParseInternalCIDR parses one prefix ("a.b.c.d/n", "x::/n") or address of
// an internal-service list, as `space server --deny-cidr` takes it.
func ParseInternalCIDR(s string) (netip.Prefix, error) {
	var p netip.Prefix
	var err error
	if strings.Contains(s, "/") {
		p, err = netip.ParsePrefix(s)
	} else {
		var a netip.Addr
		if a, err = netip.ParseAddr(s); err == nil && a.Zone() != "" {
			err = errors.New("zoned")
		} else if err == nil {
			p = netip.PrefixFrom(a, a.BitLen())
		}
	}
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%.80q: want an address or CIDR such as 203.0.113.7 or 198.51.100.0/24", s)
	}
	if p.Bits() == 0 {
		return netip.Prefix{}, fmt.Errorf("%q denies every address: list the deployment's own addresses, not the whole internet", s)
	}
	return normalizeInternal(p)
}

// Version returns the list's version.
func (s *InternalSet) Version() uint64 { return s.version }

// Prefixes returns the list's prefixes, IPv4 in IPv4 form.
func (s *InternalSet) Prefixes() []netip.Prefix { return slices.Clone(s.prefixes) }

// Strings returns the list's prefixes as text, as the control plane sends
// them.
func (s *InternalSet) Strings() []string {
	out := make([]string, len(s.prefixes))
	for i, p := range s.prefixes {
		out[i] = p.String()
	}
	return out
}

// Check decides a connection to dst against the list alone: denied when dst,
// its IPv4 form, or the IPv4 address a NAT64, 6to4 or IPv4-compatible form
// carries lies in a listed prefix. A nil set is the state before the control
// plane sent a list: every destination is denied then (the node cannot tell
// what is internal, so nothing goes out).
func (s *InternalSet) Check(dst netip.Addr) Decision {
	if s == nil {
		return deny("no internal-service list from the control plane yet (denied until the node's first heartbeat answer)")
	}
	if !dst.IsValid() || dst.Zone() != "" {
		return deny("destination %s is not a plain address", dst)
	}
	u := dst.Unmap()
	if p, ok := s.match(u); ok {
		return deny("%s is a service of this deployment (%s, always denied)", u, p)
	}
	if v4, how, ok := embedded(u); ok {
		if p, ok := s.match(v4); ok {
			return deny("%s is %s embedding %s, a service of this deployment (%s, always denied)", u, how, v4, p)
		}
	}
	return notInternal
}

// notInternal is Check's answer for an address off the list, made once:
// the common case costs no formatting.
var notInternal = Decision{Allow: true, Reason: "not an internal service"}

func (s *InternalSet) match(a netip.Addr) (netip.Prefix, bool) {
	lens, off := s.lens4, 0
	if a.Is6() {
		lens, off = s.lens6, 1000
	}
	for _, bits := range lens {
		p, err := a.Prefix(bits)
		if err != nil {
			continue
		}
		if _, ok := s.byLen[bits+off][p]; ok {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// InternalHolder holds the node's current internal-service list, shared by
// every gateway of the node, so that one Store applies a new list to all of
// them at once. The zero InternalHolder holds no list: Load returns nil and
// InternalSet.Check denies everything.
type InternalHolder struct {
	s atomic.Pointer[InternalSet]
}

// Load returns the current list, or nil before the first one.
func (h *InternalHolder) Load() *InternalSet { return h.s.Load() }

// Store makes s current when it is newer than the list held (or the first),
// and reports whether it did. An older or equal version is ignored: an
// answer delayed in flight never brings back a list already replaced.
func (h *InternalHolder) Store(s *InternalSet) bool {
	if s == nil {
		return false
	}
	for {
		old := h.s.Load()
		if old != nil && old.version >= s.version {
			return false
		}
		if h.s.CompareAndSwap(old, s) {
			return true
		}
	}
}
