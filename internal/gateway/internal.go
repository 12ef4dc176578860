package gateway

import (
	"net/netip"
	"slices"
)

// ReasonInternalService counts a flow refused because its destination is
// one of the deployment's own services (egress.InternalSet), or any flow
// before the node has the list.
const ReasonInternalService = "internal_service"

// deploymentAddr decides, before the policy and before any dial, whether dst
// belongs to the node itself (Config.HostAddrs) or to the deployment's own
// services (Config.Internal): both are refused whatever the policy allows,
// an explicit allow CIDR included. It returns the reason to count and why.
func (g *Sandbox) deploymentAddr(dst netip.Addr) (reason, why string, refused bool) {
	if slices.Contains(g.cfg.HostAddrs, dst.Unmap()) {
		return ReasonHostAddr, "the node's own address", true
	}
	if why, ok := g.internalService(dst); ok {
		return ReasonInternalService, why, true
	}
	return "", "", false
}

// internalService reports whether dst is on the deployment's internal-service
// list (or the node has no list yet), and why.
func (g *Sandbox) internalService(dst netip.Addr) (string, bool) {
	if g.cfg.Internal == nil {
		return "", false
	}
	d := g.cfg.Internal.Load().Check(dst)
	return d.Reason, !d.Allow
}
