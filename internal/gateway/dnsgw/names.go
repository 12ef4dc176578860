package dnsgw

import (
	"container/list"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

const (
	// DefaultNameTableEntries is the number of addresses a NameTable
	// remembers when NewNameTable is given maxEntries <= 0.
	DefaultNameTableEntries = 4096
	// MaxNamesPerAddr is the most domains a NameTable remembers for one
	// address. Shared hosting and CDNs put many names on one address; past
	// this bound the name that expires first is forgotten.
	MaxNamesPerAddr = 16
	// maxDomainLen bounds what Record accepts, like egress.MaxNameLen.
	maxDomainLen = 253
)

// NameTable remembers, for one sandbox, which domain names resolved to
// which addresses, so that the gateway can tell for a connection to an
// address which domain(s) the client asked for. Entries expire after the
// ttl given to Record. Memory is bounded: at most maxEntries addresses, the
// least recently recorded forgotten first, and MaxNamesPerAddr names per
// address. A NameTable is safe for concurrent use.
type NameTable struct {
	max int
	now func() time.Time

	mu     sync.Mutex                   // guards byAddr and order
	byAddr map[netip.Addr]*list.Element // values are *addrNames
	order  *list.List                   // least recently recorded first
}

// addrNames is the set of names one address was answered for.
type addrNames struct {
	addr  netip.Addr
	names []nameExpiry
}

type nameExpiry struct {
	domain  string
	expires time.Time
}

// NewNameTable returns an empty NameTable holding at most maxEntries
// addresses (DefaultNameTableEntries when maxEntries <= 0). now is the
// clock, time.Now when nil.
func NewNameTable(maxEntries int, now func() time.Time) *NameTable {
	if maxEntries <= 0 {
		maxEntries = DefaultNameTableEntries
	}
	if now == nil {
		now = time.Now
	}
	return &NameTable{max: maxEntries, now: now, byAddr: make(map[netip.Addr]*list.Element), order: list.New()}
}

// Record remembers that domain resolved to addrs, for ttl. The domain is
// stored lowercase without a trailing dot; addresses are unmapped
// (::ffff:a.b.c.d is stored as a.b.c.d) and stripped of any zone. Recording
// a name again for an address refreshes its expiry. Empty or overlong
// domains, invalid addresses and a ttl <= 0 are ignored.
func (t *NameTable) Record(domain string, addrs []netip.Addr, ttl time.Duration) {
	domain = normalizeDomain(domain)
	if domain == "" || len(domain) > maxDomainLen || ttl <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	exp := now.Add(ttl)
	for _, a := range addrs {
		if !a.IsValid() {
			continue
		}
		a = a.Unmap().WithZone("")
		el, ok := t.byAddr[a]
		if !ok {
			el = t.order.PushBack(&addrNames{addr: a})
			t.byAddr[a] = el
		} else {
			t.order.MoveToBack(el)
		}
		el.Value.(*addrNames).add(domain, exp, now)
	}
	t.evict(now)
}

// evict forgets expired addresses at the front of the order and then the
// least recently recorded ones until at most t.max remain.
func (t *NameTable) evict(now time.Time) {
	for el := t.order.Front(); el != nil; el = t.order.Front() {
		e := el.Value.(*addrNames)
		if t.order.Len() <= t.max && !e.expired(now) {
			return
		}
		t.order.Remove(el)
		delete(t.byAddr, e.addr)
	}
}

// Domains returns the unexpired domains a was answered for, sorted, or nil.
// a is compared after Unmap, so ::ffff:a.b.c.d finds names recorded for
// a.b.c.d.
func (t *NameTable) Domains(a netip.Addr) []string {
	if !a.IsValid() {
		return nil
	}
	a = a.Unmap().WithZone("")
	t.mu.Lock()
	defer t.mu.Unlock()
	el, ok := t.byAddr[a]
	if !ok {
		return nil
	}
	e := el.Value.(*addrNames)
	e.prune(t.now())
	if len(e.names) == 0 {
		t.order.Remove(el)
		delete(t.byAddr, a)
		return nil
	}
	out := make([]string, len(e.names))
	for i, n := range e.names {
		out[i] = n.domain
	}
	slices.Sort(out)
	return out
}

// Len returns the number of addresses remembered, expired ones not yet
// forgotten included.
func (t *NameTable) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.order.Len()
}

// add records domain until exp, refreshing it when present and otherwise
// making room by dropping expired names and then the one expiring first.
func (e *addrNames) add(domain string, exp, now time.Time) {
	for i := range e.names {
		if e.names[i].domain == domain {
			e.names[i].expires = exp
			return
		}
	}
	if len(e.names) >= MaxNamesPerAddr {
		e.prune(now)
	}
	if len(e.names) >= MaxNamesPerAddr {
		first := 0
		for i, n := range e.names {
			if n.expires.Before(e.names[first].expires) {
				first = i
			}
		}
		e.names = slices.Delete(e.names, first, first+1)
	}
	e.names = append(e.names, nameExpiry{domain: domain, expires: exp})
}

// prune drops the expired names.
func (e *addrNames) prune(now time.Time) {
	e.names = slices.DeleteFunc(e.names, func(n nameExpiry) bool { return !now.Before(n.expires) })
}

// expired reports whether every name of e has expired.
func (e *addrNames) expired(now time.Time) bool {
	for _, n := range e.names {
		if now.Before(n.expires) {
			return false
		}
	}
	return true
}

// normalizeDomain lowercases ASCII letters and drops one trailing dot.
// Other bytes are kept as they are: DNS names are bytes, not UTF-8.
func normalizeDomain(d string) string {
	d = strings.TrimSuffix(d, ".")
	for i := 0; i < len(d); i++ {
		if c := d[i]; c >= 'A' && c <= 'Z' {
			b := []byte(d)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return d
}
