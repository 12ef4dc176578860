// Package sandboxnet is a sandbox's network as the guest sees it: one
// interface, the same addresses in every sandbox (each sandbox has a link of
// its own to its own gateway stack, so they never meet), and the code that
// configures it from inside the guest (the ns runtime's init and the VM's
// init both call Configure).
//
// The gateway end owns Gateway and DNS; everything else the guest sends
// goes to the gateway's forwarder, which decides it with the sandbox's
// egress policy.
package sandboxnet

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

const (
	// IfName is the guest's network interface.
	IfName = "eth0"
	// MTU of the link on both ends.
	MTU = 1500
)

var (
	// GuestPrefix is the guest's address and the link's prefix.
	GuestPrefix = netip.MustParsePrefix("10.0.2.15/24")
	// Gateway is the gateway's address: the guest's default route.
	Gateway = netip.MustParseAddr("10.0.2.2")
	// DNS is the gateway's resolver, the guest's only name server.
	DNS = netip.MustParseAddr("10.0.2.3")
	// GuestMAC is the guest's MAC address (a locally administered one).
	GuestMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	// GatewayMAC is the gateway's MAC address on the link.
	GatewayMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x02}
)

// ResolvConf is the guest's /etc/resolv.conf.
func ResolvConf() []byte {
	return []byte("# written by SPACE: the sandbox's gateway answers DNS\nnameserver " + DNS.String() + "\noptions edns0 trust-ad\n")
}

// Configure brings up lo and the interface named ifname, with GuestMAC when
// setMAC, GuestPrefix and a default route via Gateway. It runs inside the
// sandbox's network namespace (or the VM) with CAP_NET_ADMIN there.
func Configure(ifname string, setMAC bool) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("network: find lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("network: bring lo up: %w", err)
	}
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("network: find %s: %w", ifname, err)
	}
	if setMAC {
		if err := netlink.LinkSetHardwareAddr(link, GuestMAC); err != nil {
			return fmt.Errorf("network: set %s address %s: %w", ifname, GuestMAC, err)
		}
	}
	if err := netlink.LinkSetMTU(link, MTU); err != nil {
		return fmt.Errorf("network: set %s mtu %d: %w", ifname, MTU, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: GuestPrefix.Addr().AsSlice(), Mask: net.CIDRMask(GuestPrefix.Bits(), 32)}}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("network: add %s to %s: %w", GuestPrefix, ifname, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("network: bring %s up: %w", ifname, err)
	}
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: Gateway.AsSlice()}
	if err := netlink.RouteAdd(route); err != nil {
		return fmt.Errorf("network: default route via %s: %w", Gateway, err)
	}
	return nil
}
