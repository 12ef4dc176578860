package node

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/gateway"
	"github.com/spacesandbox/space/internal/gateway/dnsgw"
	"github.com/spacesandbox/space/internal/gateway/intercept"
	"github.com/spacesandbox/space/internal/metrics"
)

// GatewayConfig turns on sandbox networking on this node: every execution
// gets a network interface whose other end is a gateway.Sandbox in this
// process. Without it executions have loopback only.
type GatewayConfig struct {
	// Dialer opens the gateway's upstream connections.
	Dialer gateway.Dialer
	// Upstream resolves the sandboxes' DNS queries.
	Upstream dnsgw.Upstream
	// Credentials, when set, lets the gateway inject credentials: it asks
	// the control plane for them; without it TLS is never intercepted.
	Credentials *CredentialClient
	// UpstreamRoots verifies the certificates of intercepted upstreams;
	// nil uses the system roots.
	UpstreamRoots *x509.CertPool
	// HostAddrs are the node's own addresses, refused to every sandbox.
	HostAddrs []netip.Addr
}

// gateways holds the running gateways of this node's executions.
type gateways struct {
	mu       sync.Mutex
	byExec   map[string]*execGateway
	counters gateway.Counters
	// dns counts the DNS queries of every sandbox by decision.
	dns dnsgw.Totals
	// internal is the deployment's internal-service list from the last
	// heartbeat answer, shared by every gateway (internalnet.go).
	internal egress.InternalHolder
	// warnedNoList is set once the log said that the control plane sends
	// no list.
	warnedNoList atomic.Bool
	// intercept counts what the credential interceptors redacted.
	intercept intercept.Counters
}

type execGateway struct {
	gw     *gateway.Sandbox
	policy *egress.Holder
}

// parseEgress reads the policy the control plane sent; an absent one denies
// everything (the control plane always sends one).
func parseEgress(raw json.RawMessage) (*egress.Policy, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return egress.NewPolicy(egress.Spec{})
	}
	return egress.ParsePolicy(raw)
}

// attachGateway starts the gateway of rec on link. It owns link from here.
func (m *Manager) attachGateway(rec *Record, link *driver.Link) error {
	if link == nil {
		return nil
	}
	if m.cfg.Gateway == nil {
		link.Close()
		return nil
	}
	p, err := parseEgress(rec.Egress)
	if err != nil {
		link.Close()
		return fmt.Errorf("exec %s: egress policy: %w", rec.ExecID, err)
	}
	holder := egress.NewHolder(p)
	cfg := gateway.Config{
		Sandbox: rec.SandboxID, Execution: rec.ExecID,
		Policy: holder, Upstream: m.cfg.Gateway.Upstream, Dialer: m.cfg.Gateway.Dialer,
		Counters: &m.gateways.counters, DNSTotals: &m.gateways.dns, Log: m.log, HostAddrs: m.cfg.Gateway.HostAddrs,
		Internal: &m.gateways.internal,
	}
	if rec.CA != nil && m.cfg.Gateway.Credentials != nil {
		ca, err := intercept.LoadCA([]byte(rec.CA.CertPEM), []byte(rec.CA.KeyPEM))
		if err != nil {
			link.Close()
			return fmt.Errorf("exec %s: sandbox CA: %w", rec.ExecID, err)
		}
		creds := execCredentials{c: m.cfg.Gateway.Credentials, sandbox: rec.SandboxID, execID: rec.ExecID}
		cfg.Interceptor = &credentialInterceptor{creds: creds, base: intercept.Interceptor{
			CA: ca, Policy: holder, Credentials: creds, UpstreamRoots: m.cfg.Gateway.UpstreamRoots,
			Identity: credentials.Request{Tenant: rec.TenantID, Sandbox: rec.SandboxID, ExecutionID: rec.ExecID},
			Log:      m.log.With("component", "intercept", "sandbox", rec.SandboxID, "exec", rec.ExecID),
			Counters: &m.gateways.intercept,
		}}
	}
	gw, err := gateway.Attach(link, cfg)
	if err != nil {
		return fmt.Errorf("exec %s: gateway: %w", rec.ExecID, err)
	}
	m.gateways.mu.Lock()
	if m.gateways.byExec == nil {
		m.gateways.byExec = map[string]*execGateway{}
	}
	old := m.gateways.byExec[rec.ExecID]
	m.gateways.byExec[rec.ExecID] = &execGateway{gw: gw, policy: holder}
	m.gateways.mu.Unlock()
	if old != nil {
		old.gw.Close()
	}
	return nil
}

// detachGateway stops an execution's gateway: every flow is cut.
func (m *Manager) detachGateway(execID string) {
	m.gateways.mu.Lock()
	g := m.gateways.byExec[execID]
	delete(m.gateways.byExec, execID)
	m.gateways.mu.Unlock()
	if g != nil {
		g.gw.Close()
	}
}

// SetEgress replaces a running execution's policy. New connections and DNS
// queries get the new one; open connections keep their decision.
func (m *Manager) SetEgress(execID string, raw json.RawMessage) error {
	p, err := egress.ParsePolicy(raw)
	if err != nil {
		return err
	}
	unlock := m.locks.Lock(execID)
	defer unlock()
	rec, err := m.records.load(execID)
	if err != nil {
		return err
	}
	m.gateways.mu.Lock()
	g := m.gateways.byExec[execID]
	m.gateways.mu.Unlock()
	// Persisted first: a gateway re-attached after a restart uses it.
	rec.Egress = append(json.RawMessage(nil), raw...)
	if err := m.records.save(rec); err != nil {
		return err
	}
	if g == nil {
		return fmt.Errorf("%w: exec %s has no network gateway on this node (started without a network, or its link was lost in a node restart); the policy applies at its next start", errdefs.ErrFailedPrecondition, execID)
	}
	g.policy.Store(p)
	return nil
}

// writeGatewayMetrics adds the gateway's decision counters.
func (m *Manager) writeGatewayMetrics(w io.Writer) {
	metrics.WriteCounter(w, "space_gateway_flows_total",
		"Sandbox network flows by the gateway's decision: allowed, intercepted, or the reason of a refusal.",
		"decision", []string{gateway.ReasonAllowed, gateway.ReasonPolicy, gateway.ReasonInternalService, gateway.ReasonFlowLimit, gateway.ReasonPendingSYN, gateway.ReasonUDP}, m.gateways.counters.Snapshot())
	metrics.WriteCounter(w, "space_gateway_dns_queries_total",
		"Sandbox DNS queries by the gateway's decision: answered, or refused by policy, over the per-sandbox rate (rate_limited), failed upstream, malformed or unsupported.",
		"decision", dnsgw.Decisions, m.gateways.dns.Snapshot())
	metrics.WriteCounter(w, "space_gateway_credential_redactions_total",
		"Occurrences of an injected credential's secret removed from responses before the sandbox read them, and responses refused because their content coding could not be scanned.",
		"what", nil, map[string]uint64{
			"redacted":    m.gateways.intercept.Redactions.Load(),
			"unscannable": m.gateways.intercept.Unscannable.Load(),
		})
}

// ReattachGateways gives every execution this node holds a gateway again
// after a restart of this process: the old links went with the old process,
// so the node-manager makes new ones (a new tap configured in the sandbox's
// namespace; a new connection to QEMU's network socket). An execution whose
// link cannot be reopened keeps running without a network, and says so in
// the log.
func (m *Manager) ReattachGateways(ctx context.Context) {
	if m.cfg.Gateway == nil {
		return
	}
	recs, _ := m.records.all()
	for _, rec := range recs {
		if rec.Pool {
			continue // prepared by an earlier run: recoverPool removes it
		}
		unlock := m.locks.Lock(rec.ExecID)
		m.gateways.mu.Lock()
		_, attached := m.gateways.byExec[rec.ExecID]
		m.gateways.mu.Unlock()
		if attached {
			unlock()
			continue
		}
		link, err := m.cfg.Privileged.ReopenLink(ctx, rec.physicalID(), rec.Runtime)
		if err == nil {
			err = m.attachGateway(rec, link)
		}
		unlock()
		if err != nil {
			m.log.Warn("execution has no network after the node restarted", "exec", rec.ExecID, "sandbox", rec.SandboxID, "err", err)
			continue
		}
		m.log.Info("network gateway reattached", "exec", rec.ExecID, "sandbox", rec.SandboxID)
	}
}
