package node

import (
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/gateway"
	"github.com/spacesandbox/space/internal/gateway/dnsgw"
)

// TestGatewayMetricsExposeLimitRefusals: the node's metrics have the
// gateway's connection-cap refusals (flow_limit, pending_syn_limit) and its
// UDP refusals, and its DNS refusals (policy, rate limit), from the first
// scrape, at zero, so an alert on their rate is
// defined before the first flood.
func TestGatewayMetricsExposeLimitRefusals(t *testing.T) {
	var m Manager
	var b strings.Builder
	m.writeGatewayMetrics(&b)
	for _, reason := range []string{gateway.ReasonFlowLimit, gateway.ReasonPendingSYN, gateway.ReasonUDP} {
		series := `space_gateway_flows_total{decision="` + reason + `"} 0`
		if !strings.Contains(b.String(), series+"\n") {
			t.Errorf("node metrics have no %s:\n%s", series, b.String())
		}
	}
	// DNS queries refused by policy or over a sandbox's rate, likewise.
	for _, decision := range []string{dnsgw.DecisionRefused, dnsgw.DecisionRateLimited, dnsgw.DecisionAnswered} {
		series := `space_gateway_dns_queries_total{decision="` + decision + `"} 0`
		if !strings.Contains(b.String(), series+"\n") {
			t.Errorf("node metrics have no %s:\n%s", series, b.String())
		}
	}
}
