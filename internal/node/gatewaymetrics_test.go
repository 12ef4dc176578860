package node

import (
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/gateway"
)

// TestGatewayMetricsExposeLimitRefusals: the node's metrics have the
// gateway's connection-cap refusals (flow_limit, pending_syn_limit) and its
// UDP refusals from the first scrape, at zero, so an alert on their rate is
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
}
