package gateway

import (
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/spacesandbox/space/internal/sandboxnet"
)

// isDNSPort reports whether port is DNS's (53) or DNS over TLS or QUIC's
// (853).
func isDNSPort(port uint16) bool { return port == 53 || port == 853 }

// admitTCP refuses, whatever the policy says, a connection to a DNS port of
// any resolver but the gateway's own, and hands every other connection to
// forwardTCP. The gateway's DNS is where the policy's domain rules, the
// tunnel bounds and the rate limit apply, and where the sandbox's names are
// learnt for connection decisions: a resolver of the sandbox's choosing
// (DNS over TCP on 53, DoT on 853) would go around all of them. DNS over
// HTTPS cannot be told apart by port; it is a TLS flow like any other,
// decided by the policy's domain rules.
func (g *Sandbox) admitTCP(r *tcp.ForwarderRequest) {
	id := r.ID()
	dst := netip.AddrPortFrom(addrOf(id.LocalAddress), id.LocalPort)
	if isDNSPort(dst.Port()) && dst.Addr() != sandboxnet.DNS && dst.Addr() != sandboxnet.Gateway {
		g.refused(ReasonDNSResolver, dst, "", "DNS is answered by the gateway only ("+sandboxnet.DNS.String()+":53, over UDP)")
		r.Complete(true)
		return
	}
	g.forwardTCP(r)
}
