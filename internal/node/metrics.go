package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/bridge"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/loglimit"
	"github.com/spacesandbox/space/internal/metrics"
)

// Reasons a capability check refuses a request: the reason label of
// space_node_capability_refusals_total.
const (
	refusedSignature    = "deny-signature" // malformed token, unknown key, bad signature
	refusedExpired      = "deny-expired"
	refusedSandbox      = "deny-sandbox" // valid capability for another sandbox
	refusedOp           = "deny-op"      // operation the capability does not allow
	refusedPort         = "deny-port"    // ServicePort capability for another port or protocol
	refusedRefreshRoute = "refresh-route"
	refusedNoKeys       = "no-keys" // the node has no verification keys yet
	refusedMissing      = "missing" // no capability on the request
	refusedNotYetValid  = "deny-not-yet-valid"
	refusedClock        = "clock" // the node's clock does not agree with the control plane's
)

// capabilityReasons are the reasons always exposed, zero or not, so a rate
// over them is defined from the first scrape.
var capabilityReasons = []string{
	refusedSignature, refusedExpired, refusedSandbox, refusedOp, refusedPort,
	refusedRefreshRoute, refusedNoKeys, refusedMissing, refusedNotYetValid, refusedClock,
}

// Checks of a host bridge peer (bridgeconn.go): the check label of
// space_node_bridge_peer_refusals_total.
const (
	peerCheckCred  = "peercred"   // SO_PEERCRED could not be read
	peerCheckUID   = "uid"        // the peer runs as another user
	peerCheckPid   = "pid"        // the peer is another process
	peerCheckStart = "start-time" // the bridge's pid now names another process
	peerCheckExe   = "exe"        // the bridge process runs another executable
)

var peerChecks = []string{peerCheckCred, peerCheckUID, peerCheckPid, peerCheckStart, peerCheckExe}

// refusalMetrics counts what the node refused. The Manager owns them; the
// bridge connections it makes count into bridgePeer.
type refusalMetrics struct {
	capability *metrics.CounterVec // by reason
	bridgePeer *metrics.CounterVec // by failed check
	streams    *metrics.CounterVec // forwarded requests over the per-execution cap, by surface
}

func newRefusalMetrics() *refusalMetrics {
	return &refusalMetrics{
		capability: metrics.NewCounterVec("space_node_capability_refusals_total",
			"Requests the node refused at its capability check, by reason.", "reason").Always(capabilityReasons...),
		bridgePeer: metrics.NewCounterVec("space_node_bridge_peer_refusals_total",
			"Connections to a host bridge socket refused because the peer was not the bridge the node started, by failed check.", "check").Always(peerChecks...),
		streams: metrics.NewCounterVec("space_node_streams_refused_total",
			"Requests the node refused to forward because their execution had as many in flight as it may (too_many_streams), by surface.", "surface").Always(streamSurfaces...),
	}
}

// write writes the counters in the Prometheus text exposition format.
func (r *refusalMetrics) write(w io.Writer) {
	r.capability.Write(w)
	r.bridgePeer.Write(w)
	r.streams.Write(w)
}

// handleMetrics serves GET /node/v1/metrics: the refusal counters and the
// heartbeat's report counts as Prometheus text. Like every node-api route it needs the node token.
func (m *Manager) handleMetrics(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	m.refusals.write(&b)
	m.reported.Write(&b)
	refusals, protocolErrors := m.bridgeCounts(r.Context())
	metrics.WriteCounter(&b, "space_bridge_capability_refusals_total",
		"Requests the host bridges of this node's executions refused at their own capability check, by reason.",
		"reason", []string{bridge.RefusedDeny, bridge.RefusedRefreshRoute, bridge.RefusedClock, bridge.RefusedNotYetValid}, refusals)
	m.guestErrors.write(&b, protocolErrors)
	m.writeGatewayMetrics(&b)
	m.writeClockMetrics(&b)
	if m.cfg.ExtraMetrics != nil {
		m.cfg.ExtraMetrics(&b)
	}
	w.Header().Set("Content-Type", metrics.ContentType)
	_, _ = io.WriteString(w, b.String())
}

// capabilityRefused counts a refusal of checkCapability and logs it with both
// identities: the capability's (c, nil when it did not verify) and the one
// this node installed for rec. why is the refusal's detail.
func (m *Manager) capabilityRefused(rec *Record, c *capability.Capability, reason, why string) {
	m.refusals.capability.Inc(reason)
	level := slog.LevelWarn
	switch reason {
	case refusedRefreshRoute, refusedNoKeys:
		// Expected while routes and keys propagate.
		level = slog.LevelInfo
	}
	installed := slog.Group("installed",
		"sandbox", rec.SandboxID, "generation", rec.Generation, "node", m.cfg.NodeID,
		"substrate", rec.Runtime, "activation", rec.ActivationID)
	presented := slog.String("capability", "none or unverified")
	if c != nil {
		presented = slog.Group("capability",
			"sandbox", c.Sandbox, "generation", c.Generation, "node", c.Node,
			"substrate", c.Substrate, "activation", c.Activation, "ops", opsString(c.Ops),
			"key", c.KeyID, "expires", c.ExpiresAt)
	}
	suppressed, ok := refusalLogs.Allow(reason, time.Now())
	if !ok {
		return // counted above; the next line logged says how many were not
	}
	m.log.Log(context.Background(), level, "capability refused", "reason", reason, "why", why, "exec", rec.ExecID,
		"unlogged_since_last", suppressed, presented, installed)
}

// refusalLogs bounds the refusal log lines: a hostile client sending garbage
// capabilities must not fill the node's log. Every refusal is counted.
var refusalLogs = loglimit.New(10)

// verifyRefusal is the reason for a token that failed decoding or
// verification.
func verifyRefusal(err error) string {
	if errors.Is(err, capability.ErrExpired) {
		return refusedExpired
	}
	if errors.Is(err, capability.ErrNotYetValid) {
		return refusedNotYetValid
	}
	return refusedSignature
}

// denyReason tells which of capability.Compare's Deny cases refused c. It
// tests them in Compare's order; TestDenyReasonAgreesWithCompare keeps the two
// in step.
func denyReason(c *capability.Capability, installed capability.Identity, req capability.Request) string {
	switch {
	case c.Sandbox != installed.Sandbox:
		return refusedSandbox
	case req.Op == 0 || c.Ops&req.Op != req.Op:
		return refusedOp
	case req.Op&capability.OpServicePort != 0 && (c.Port != req.Port || c.Protocol != req.Protocol):
		return refusedPort
	}
	return "deny-other"
}

// opsString names the operations of a capability for a log line.
func opsString(ops capability.Op) string {
	var names []string
	for _, o := range []struct {
		op   capability.Op
		name string
	}{{capability.OpExec, "exec"}, {capability.OpFiles, "files"}, {capability.OpLifecycle, "lifecycle"}, {capability.OpServicePort, "service-port"}} {
		if ops&o.op != 0 {
			names = append(names, o.name)
			ops &^= o.op
		}
	}
	if ops != 0 {
		names = append(names, fmt.Sprintf("%#x", uint32(ops)))
	}
	return strings.Join(names, ",")
}

// bridgeCounts adds up the counts of the host bridges of this node's
// executions (each bridge is its own process and counts its own): their
// refusals by reason and their guests' protocol errors by kind. A bridge
// that does not answer within the budget is skipped; one that has exited
// is counted by countProtocolErrors instead.
func (m *Manager) bridgeCounts(ctx context.Context) (refusals, protocolErrors map[string]uint64) {
	m.mu.Lock()
	conns := make([]*bridgeConn, 0, len(m.bridges))
	for _, bc := range m.bridges {
		conns = append(conns, bc)
	}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	refusals, protocolErrors = map[string]uint64{}, map[string]uint64{}
	for _, bc := range conns {
		counts, err := bc.metrics(ctx)
		if err != nil {
			continue
		}
		for k, v := range counts.Refusals {
			refusals[k] += v
		}
		for k, v := range counts.GuestProtocolErrors {
			protocolErrors[k] += v
		}
	}
	return refusals, protocolErrors
}
