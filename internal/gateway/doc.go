// Package gateway is the network gateway of a node: every sandbox's only
// network interface ends here, in a userspace TCP/IP stack (gVisor's
// netstack) of its own, and every flow the sandbox opens is terminated in Go
// and decided one by one with the sandbox's egress policy (internal/egress)
// before the gateway dials the destination itself. The sandbox never has a
// route to the host, to another sandbox or to anything the policy refuses:
// there is no packet forwarding, only flows the gateway chose to open.
//
// Per sandbox (Attach):
//
//   - the link (driver.Link: a tap fd for ns, QEMU's stream socket for vm)
//     carries Ethernet frames; the stack owns sandboxnet.Gateway (ARP, the
//     default route's next hop) and sandboxnet.DNS;
//   - every frame is admitted or dropped before the stack sees it
//     (admitFrame): only ARP and plain IPv4 from the sandbox's own MAC and
//     address, at most the MTU; no IPv6 at all, no IP options, fragments,
//     VLAN tags or protocols but TCP, UDP and ICMP to the gateway;
//   - UDP to DNS:53 is answered by dnsgw (the policy's domain rules, tunnel
//     bounds, rate limit); any other UDP, ICMP to anything but the gateway,
//     DNS over TCP, and TCP or UDP to port 53 or 853 of another resolver
//     are dropped or refused and counted;
//   - a TCP connection is decided by destination address and port, with the
//     domains the sandbox resolved to that address through the gateway's own
//     DNS (dnsgw.NameTable); refused ones get a RST before any handshake;
//   - an allowed one is dialled upstream first (so an unreachable
//     destination looks unreachable), then accepted; its first bytes are
//     read: a TLS ClientHello's SNI must name the domain the connection was
//     allowed for, else the flow is closed; a plaintext HTTP flow has every
//     request's Host decided (copyRequests, httpflow.go), and a TLS flow's
//     later records are followed (copyTLSRecords, tlsflow.go), for as long
//     as the flow lasts;
//   - a TLS flow to a host with a credential rule is handed to the
//     interceptor (internal/gateway/intercept), which adds the credential to
//     each request on the way out; every other flow is spliced byte for
//     byte.
//
// Upstream connections go through a Dialer: the node's network namespace by
// default, or another one (NetnsDialer), so that tests, and operators, can
// give the gateway an egress namespace with nothing else in it.
package gateway
