package node

import (
	"io"
	"path/filepath"
	"sync"

	"github.com/spacesandbox/space/internal/bridge"
	"github.com/spacesandbox/space/internal/metrics"
)

// guestErrorMetrics counts the guest protocol errors of this node's
// executions (catalogue A-1): the errors of guests whose bridge has exited,
// added when the node reaps it, plus, at each scrape, those the live
// bridges count.
//
// The label is the error's kind, not the sandbox: kinds are a few dozen
// constants of the HTTP/2 client (guest.ProtocolErrors caps them), while a
// sandbox label would add series without end as sandboxes come and go. The
// sandbox is found from its events instead: the bridge ends a channel the
// guest broke with a reason naming the error, and that reason is the
// sandbox's failed or recovering event; the node also logs each with the
// sandbox's execution.
type guestErrorMetrics struct {
	mu    sync.Mutex // guards ended
	ended map[string]uint64
}

func newGuestErrorMetrics() *guestErrorMetrics {
	return &guestErrorMetrics{ended: map[string]uint64{}}
}

func (g *guestErrorMetrics) add(counts map[string]uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, v := range counts {
		g.ended[k] += v
	}
}

// write writes space_node_guest_protocol_errors_total: the ended
// executions' counts plus live's.
func (g *guestErrorMetrics) write(w io.Writer, live map[string]uint64) {
	total := map[string]uint64{}
	g.mu.Lock()
	for k, v := range g.ended {
		total[k] += v
	}
	g.mu.Unlock()
	for k, v := range live {
		total[k] += v
	}
	metrics.WriteCounter(w, "space_node_guest_protocol_errors_total",
		"Protocol errors the guests of this node's executions made on their channels (malformed frames, flow-control abuse, header blocks past the bound), by kind; the sandbox's events name the sandbox.",
		"kind", nil, total)
}

// countProtocolErrors adds what the guest of bc's execution broke, as its
// bridge wrote when it exited, to the node's counter, and logs it with the
// execution.
func (m *Manager) countProtocolErrors(bc *bridgeConn) {
	counts, err := bridge.ReadProtocolErrors(filepath.Join(bc.dir(), bridge.ProtocolErrorsFile))
	if err != nil {
		m.log.Warn("guest protocol errors not counted", "exec", bc.name(), "err", err)
		return
	}
	if len(counts) == 0 {
		return
	}
	m.guestErrors.add(counts)
	m.log.Warn("the guest broke the guest protocol; its host bridge ended the channel", "exec", bc.name(), "protocol_errors", counts)
}
