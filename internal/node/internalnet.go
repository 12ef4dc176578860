package node

import (
	"fmt"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
)

// InternalServices is the deployment's internal-service list as the
// control plane sends it with every heartbeat answer (server.InternalServices
// on the other side): the addresses of its replicas, its database, its
// object store and every node, which no sandbox may reach.
type InternalServices struct {
	// Version orders the lists: a node applies a list only when its
	// version is greater than the one it holds.
	Version uint64 `json:"version"`
	// CIDRs are the denied prefixes ("a.b.c.d/32", "x::/64").
	CIDRs []string `json:"cidrs"`
}

// SetInternalServices makes l the internal-service list of every gateway of
// this node at once (running ones included), unless the node holds the same
// or a newer version. Until the first list arrives the gateways refuse every
// connection: the node cannot tell which addresses are the deployment's own.
// A list that does not parse is refused and the one held stays.
func (m *Manager) SetInternalServices(l InternalServices) error {
	set, err := egress.ParseInternalCIDRs(l.Version, l.CIDRs)
	if err != nil {
		return fmt.Errorf("%w: internal-service list version %d: %v", errdefs.ErrInvalidArgument, l.Version, err)
	}
	if m.gateways.internal.Store(set) {
		m.log.Info("internal-service list applied to every gateway", "version", l.Version, "prefixes", len(l.CIDRs))
	}
	return nil
}

// InternalServicesVersion returns the version of the internal-service list
// the node's gateways apply; 0 before the first.
func (m *Manager) InternalServicesVersion() uint64 {
	if s := m.gateways.internal.Load(); s != nil {
		return s.Version()
	}
	return 0
}
