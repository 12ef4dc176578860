package gateway

import (
	"maps"
	"sync"
)

// Reasons a flow is refused or how it was let through, as counted and logged.
const (
	ReasonAllowed      = "allowed"
	ReasonIntercepted  = "intercepted"
	ReasonPolicy       = "policy"
	ReasonSNI          = "sni_mismatch"
	ReasonHost         = "host_mismatch"
	ReasonGatewayAddr  = "gateway_address"
	ReasonHostAddr     = "host_address"
	ReasonDNSOverTCP   = "dns_over_tcp"
	ReasonDNSResolver  = "dns_other_resolver" // TCP or UDP to port 53 or 853 of anything but the gateway
	ReasonUDP          = "udp"
	ReasonICMP         = "icmp"
	ReasonFlowLimit    = "flow_limit"        // MaxFlows open: the SYN is answered with a RST
	ReasonPendingSYN   = "pending_syn_limit" // maxPendingSYN requests being decided: the SYN is dropped
	ReasonUnreachable  = "upstream_unreachable"
	ReasonSniffFailure = "bad_first_bytes"
)

// Reasons a frame from the sandbox is dropped before the stack sees it
// (admitFrame).
const (
	ReasonRunt      = "runt_frame"          // shorter than an Ethernet header
	ReasonOversize  = "oversize_frame"      // longer than the MTU and an untagged Ethernet header
	ReasonEthertype = "ethertype"           // neither ARP, IPv4 nor IPv6: VLAN tags, anything else
	ReasonSpoofed   = "spoofed_source"      // a source MAC or address that is not the sandbox's
	ReasonMalformed = "malformed"           // an ARP or IPv4 header that does not parse
	ReasonIPOptions = "ip_options"          // an IPv4 header with options
	ReasonFragment  = "ip_fragment"         // any IPv4 fragment, first or not
	ReasonProtocol  = "ip_protocol"         // neither TCP, UDP nor ICMP: GRE, SCTP, IGMP...
	ReasonMartian   = "martian_destination" // an IPv4 destination in 127/8 or 0/8
	ReasonIPv6      = "ipv6"                // every IPv6 frame: the gateway has no IPv6
)

// Counters counts the gateway's decisions by reason, for every sandbox of a
// node together (a per-sandbox label would be unbounded; logs name the
// sandbox). The zero value is ready; a nil *Counters counts nothing.
type Counters struct {
	mu sync.Mutex
	m  map[string]uint64
}

func (c *Counters) add(_ string, reason string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string]uint64)
	}
	c.m[reason]++
	c.mu.Unlock()
}

// Snapshot returns the counts by reason.
func (c *Counters) Snapshot() map[string]uint64 {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m)
}
