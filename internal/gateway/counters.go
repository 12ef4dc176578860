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
	ReasonUDP          = "udp"
	ReasonICMP         = "icmp"
	ReasonFlowLimit    = "flow_limit"
	ReasonUnreachable  = "upstream_unreachable"
	ReasonSniffFailure = "bad_first_bytes"
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
