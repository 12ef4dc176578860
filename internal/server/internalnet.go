package server

import (
	"context"
	"github.com/spacesandbox/space/internal/nodefacing"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/store"
)

// A sandbox must never reach the deployment's own services, whatever its
// policy: the control-plane replicas, the database, the object store and
// every node's API. Their addresses are often public, so the always-denied
// ranges of egress do not cover them. The control plane gathers them and
// sends the list with every heartbeat answer; each node applies it to all
// its gateways (node/internalnet.go).
//
// What the list holds:
//   - the address each node's heartbeat connection reached (the listener as
//     nodes see it), the host name it dialled (resolved), and this replica's
//     listener address (every interface address when it listens on all);
//   - the other replicas' own addresses of those kinds, which every replica
//     publishes in the shared store (store.ReplicaAddresses);
//   - every registered node's address (its advertised host, resolved) and
//     the address its heartbeats come from;
//   - InternalConfig.Hosts: the database and object-store hosts, resolved;
//   - InternalConfig.DenyCIDRs, the operator's --deny-cidr prefixes.
//
// Names are resolved again every ResolveEvery; an address stays on the list
// for Keep after it was last seen, so a deployment name rebinding to other
// addresses never opens a window on the old ones.

// DefaultInternalResolveEvery and DefaultInternalKeep are the defaults of
// InternalConfig.
const (
	DefaultInternalResolveEvery = 30 * time.Second
	DefaultInternalKeep         = time.Hour
)

// InternalConfig says which addresses besides the ones the control plane
// learns by itself (listeners, nodes) are the deployment's own.
type InternalConfig struct {
	// DenyCIDRs are denied as given (space server --deny-cidr).
	DenyCIDRs []netip.Prefix
	// Hosts are names or address literals of the deployment's services,
	// resolved every ResolveEvery (ServiceHosts gives those of the
	// database and object-store URLs).
	Hosts []string
	// ResolveEvery is how often names are resolved again; 0:
	// DefaultInternalResolveEvery.
	ResolveEvery time.Duration
	// Keep is how long an address stays denied after it was last seen;
	// 0: DefaultInternalKeep.
	Keep time.Duration
	// Resolver resolves Hosts and node names; nil: net.DefaultResolver.
	Resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}
}

// InternalServices is the internal-service list of a heartbeat answer
// (mirrored by node.InternalServices).
type InternalServices struct {
	// Version is the time of the list's last change in Unix milliseconds,
	// increasing on every change: nodes apply only a newer list.
	Version uint64 `json:"version"`
	// CIDRs are the denied prefixes.
	CIDRs []string `json:"cidrs"`
}

// internalServices gathers the list (see the comment at the top).
type internalServices struct {
	cfg InternalConfig
	// kick asks run for a resolution now (a new name was seen).
	kick chan struct{}
	// nodeAddrs lists the advertised addresses of every registered node
	// (the store's registry, shared by the replicas); nil: none.
	nodeAddrs func(ctx context.Context) ([]string, error)
	// replicas shares the replicas' own addresses (a store with several
	// replicas on it); nil: this replica learns no other's. replica is
	// this process's name there.
	replicas store.ReplicaAddresses
	replica  string

	mu sync.Mutex // guards the fields below
	// seen is when each learnt address was last seen.
	seen map[netip.Addr]time.Time
	// names are the host names to resolve: cfg.Hosts, node names and the
	// names nodes dialled this replica by.
	names map[string]bool
	// listen are this replica's listener addresses.
	listen []netip.Addr
	// own is when each of this replica's own addresses (listener, and the
	// addresses nodes reached it at) was last seen: published to the other
	// replicas through replicas.
	own     map[netip.Addr]time.Time
	version uint64
	list    *InternalServices // nil: to be rebuilt
}

func newInternalServices(cfg InternalConfig) *internalServices {
	if cfg.ResolveEvery <= 0 {
		cfg.ResolveEvery = DefaultInternalResolveEvery
	}
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultInternalKeep
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	s := &internalServices{cfg: cfg, kick: make(chan struct{}, 1), seen: map[netip.Addr]time.Time{}, names: map[string]bool{},
		own: map[netip.Addr]time.Time{}}
	for _, h := range cfg.Hosts {
		s.addHost(h, time.Now())
	}
	return s
}

// addHost learns an address literal at once, or a name to resolve.
func (s *internalServices) addHost(host string, now time.Time) {
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if host == "" || strings.HasPrefix(host, "/") {
		return // no host, or a Unix socket directory
	}
	if a, err := netip.ParseAddr(host); err == nil {
		s.note(now, a.WithZone(""))
		return
	}
	s.mu.Lock()
	known := s.names[strings.ToLower(host)]
	s.names[strings.ToLower(host)] = true
	s.mu.Unlock()
	if !known {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// note records addrs as seen now.
func (s *internalServices) note(now time.Time, addrs ...netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range addrs {
		if !a.IsValid() {
			continue
		}
		a = a.Unmap().WithZone("")
		if _, ok := s.seen[a]; !ok {
			s.list = nil
		}
		s.seen[a] = now
	}
}

// noteOwn records addrs as this replica's own, seen now.
func (s *internalServices) noteOwn(now time.Time, addrs ...netip.Addr) {
	s.note(now, addrs...)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range addrs {
		if a.IsValid() {
			s.own[a.Unmap().WithZone("")] = now
		}
	}
}

// shareOwn publishes this replica's own addresses to the other replicas
// (valid for three resolutions) and learns theirs.
func (s *internalServices) shareOwn(ctx context.Context, now time.Time) {
	if s.replicas == nil {
		return
	}
	s.mu.Lock()
	var mine []string
	for a, at := range s.own {
		if now.Sub(at) > s.cfg.Keep {
			delete(s.own, a)
			continue
		}
		if len(mine) < store.MaxReplicaAddresses {
			mine = append(mine, a.String())
		}
	}
	s.mu.Unlock()
	if err := s.replicas.PutReplicaAddresses(ctx, s.replica, mine, now.Add(3*s.cfg.ResolveEvery), now); err != nil {
		return // the next resolution tries again
	}
	others, err := s.replicas.ListReplicaAddresses(ctx, now)
	if err != nil {
		return
	}
	for _, o := range others {
		if a, err := netip.ParseAddr(o); err == nil {
			s.note(now, a)
		}
	}
}

// setListener records this replica's listener address; an unspecified one
// (all interfaces) stands for every address of the host.
func (s *internalServices) setListener(addr net.Addr) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return
	}
	as := []netip.Addr{ap.Addr()}
	if ap.Addr().IsUnspecified() {
		as = interfaceAddrs()
	}
	s.mu.Lock()
	s.listen = as
	s.mu.Unlock()
	s.noteOwn(time.Now(), as...)
}

func interfaceAddrs() []netip.Addr {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, ifa := range ifas {
		if p, err := netip.ParsePrefix(ifa.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

// heartbeat learns from one node's heartbeat request: the address and name
// it reached this replica by, its own source address and its advertised
// address.
func (s *internalServices) heartbeat(r nodefacing.Origin, advertised string) {
	now := time.Now()
	if r.Local != nil {
		if ap, err := netip.ParseAddrPort(r.Local.String()); err == nil {
			s.noteOwn(now, ap.Addr())
		}
	}
	if ap, err := netip.ParseAddrPort(r.Remote); err == nil {
		s.note(now, ap.Addr())
	}
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		s.addHost(h, now)
	} else {
		s.addHost(r.Host, now)
	}
	s.addHost(nodeHost(advertised), now)
}

// nodeHost returns the host of a node's advertised address (HOST:PORT or a
// URL); "" for a Unix socket.
func nodeHost(addr string) string {
	if strings.HasPrefix(addr, "unix:") || strings.HasPrefix(addr, "/") {
		return ""
	}
	if u, err := url.Parse(addr); err == nil && u.Host != "" {
		return u.Hostname()
	}
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// resolve resolves every known name once and expires what was not seen for
// Keep. A name that does not resolve keeps its previous addresses until
// they expire.
func (s *internalServices) resolve(ctx context.Context) {
	if s.nodeAddrs != nil {
		if addrs, err := s.nodeAddrs(ctx); err == nil {
			for _, a := range addrs {
				s.addHost(nodeHost(a), time.Now())
			}
		}
	}
	s.mu.Lock()
	names := make([]string, 0, len(s.names))
	for n := range s.names {
		names = append(names, n)
	}
	listen := slices.Clone(s.listen)
	s.mu.Unlock()
	now := time.Now()
	s.noteOwn(now, listen...)
	s.shareOwn(ctx, now)
	for _, n := range names {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		as, err := s.cfg.Resolver.LookupNetIP(rctx, "ip", n)
		cancel()
		if err == nil {
			s.note(now, as...)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for a, at := range s.seen {
		if now.Sub(at) > s.cfg.Keep {
			delete(s.seen, a)
			s.list = nil
		}
	}
}

// run resolves the names every ResolveEvery, and at once when a new name
// is learnt, until ctx is done.
func (s *internalServices) run(ctx context.Context) {
	t := time.NewTicker(s.cfg.ResolveEvery)
	defer t.Stop()
	for {
		s.resolve(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

// current returns the list, rebuilt with a new version after a change.
func (s *internalServices) current() InternalServices {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.list == nil {
		ps := slices.Clone(s.cfg.DenyCIDRs)
		for a := range s.seen {
			ps = append(ps, netip.PrefixFrom(a, a.BitLen()))
		}
		set, err := egress.NewInternalSet(0, ps)
		var cidrs []string
		if err == nil {
			cidrs = set.Strings()
		} else {
			// Over the size bound: send the prefixes unsorted; the node
			// refuses the list and keeps denying from the one it has.
			for _, p := range ps {
				cidrs = append(cidrs, p.String())
			}
		}
		s.version = max(s.version+1, uint64(time.Now().UnixMilli()))
		s.list = &InternalServices{Version: s.version, CIDRs: cidrs}
	}
	return InternalServices{Version: s.list.Version, CIDRs: slices.Clone(s.list.CIDRs)}
}

// ServiceHosts returns the hosts of the deployment's database and object
// store from their URLs: PostgreSQL's host(s) (several, comma-separated, as
// libpq allows; the host and hostaddr parameters; a Unix socket directory
// is skipped), and an s3:// store's endpoint. SQLite and file:// stores
// have none; neither has an s3:// store on AWS's default endpoint (a shared
// public service, which a sandbox's policy decides).
func ServiceHosts(databaseURL, objectStoreURL string) []string {
	var out []string
	if u, err := url.Parse(databaseURL); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		for _, hp := range strings.Split(u.Host, ",") {
			out = append(out, hostOf(hp))
		}
		q := u.Query()
		for _, k := range []string{"host", "hostaddr"} {
			for _, v := range q[k] {
				for _, h := range strings.Split(v, ",") {
					out = append(out, h)
				}
			}
		}
	}
	if u, err := url.Parse(objectStoreURL); err == nil && u.Scheme == "s3" {
		if e := u.Query().Get("endpoint"); e != "" {
			out = append(out, hostOf(e))
		}
	}
	return slices.DeleteFunc(out, func(h string) bool { return h == "" || strings.HasPrefix(h, "/") })
}

func hostOf(hp string) string {
	if h, _, err := net.SplitHostPort(hp); err == nil {
		return h
	}
	return strings.Trim(hp, "[]")
}

// shareReplicaAddresses makes the list carry the other replicas' own
// addresses when st is shared by several (it implements
// store.ReplicaAddresses).
func (s *internalServices) shareReplicaAddresses(st store.Store) {
	if ra, ok := st.(store.ReplicaAddresses); ok {
		s.replicas, s.replica = ra, reconcile.NewReplicaID()
	}
}

// registeredNodeAddrs returns the advertised address of every node in the
// registry.
func (s *Server) registeredNodeAddrs(ctx context.Context) ([]string, error) {
	ns, err := s.store.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		out = append(out, n.Address)
	}
	return out, nil
}
