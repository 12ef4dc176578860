package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/api/node/v1/nodeapi/nodeapiv1connect"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/connecterr"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/privop"
)

// HeartbeatConfig says where and how a node reports to the control plane.
type HeartbeatConfig struct {
	// Server is the control plane's base URL.
	Server string
	// JoinToken authenticates the node to the control plane.
	JoinToken string
	// Advertise is the address the control plane reaches this node's API on.
	Advertise string
	// Every is the heartbeat interval.
	Every time.Duration
}

// heartbeatClient is the client of the control plane's node-facing service
// that heartbeats go through. It asks for no gzip: the messages are small
// (see nodeclient.New), Connect leaves a unary call without an
// Accept-Encoding when it offers no compression, and Go's transport would
// then ask for gzip in its place and the control plane compress every reply
// (TestHeartbeatRepliesAreNotCompressed).
func heartbeatClient(server string) nodeapiv1connect.ControlPlaneServiceClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableCompression = true
	return nodeapiv1connect.NewControlPlaneServiceClient(&http.Client{Transport: tr, Timeout: 10 * time.Second}, strings.TrimRight(server, "/"),
		connect.WithReadMaxBytes(4<<20), connect.WithAcceptCompression("gzip", nil, nil))
}

// RunHeartbeats registers the node and reports its capacity and executions
// every interval until ctx is done. A failed report is logged and retried.
func (m *Manager) RunHeartbeats(ctx context.Context, cfg HeartbeatConfig) error {
	if cfg.Every == 0 {
		cfg.Every = 2 * time.Second
	}
	// The first heartbeat registers the node: its API listens first.
	select {
	case <-m.serving:
	case <-ctx.Done():
		return nil
	}
	m.clock.startHeartbeats()
	client := heartbeatClient(cfg.Server)
	failures := 0
	for {
		if err := m.sendHeartbeat(ctx, client, cfg); err != nil && ctx.Err() == nil {
			failures++
			if failures == 1 || failures%30 == 0 {
				m.log.Warn("heartbeat failed", "server", cfg.Server, "err", err, "failures", failures)
			}
		} else {
			failures = 0
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(m.heartbeatEvery(cfg.Every)):
		case <-m.changed:
			// An execution's bridge exited: report now, not at the next tick.
			time.Sleep(50 * time.Millisecond) // let its exit reason land
		}
	}
}

func (m *Manager) sendHeartbeat(ctx context.Context, client nodeapiv1connect.ControlPlaneServiceClient, cfg HeartbeatConfig) error {
	hello, err := m.cfg.Privileged.Hello(ctx)
	if err != nil {
		return fmt.Errorf("node-manager: %w", err)
	}
	req := connect.NewRequest(m.heartbeat(ctx, hello, cfg.Advertise))
	req.Header().Set("Authorization", "Bearer "+cfg.JoinToken)
	// The lease an answer renews runs from now: before the control plane
	// saw the heartbeat, so the node's lease ends before its count does.
	sent := time.Now()
	clockSent := m.readClock()
	resp, err := client.Heartbeat(ctx, req)
	if err != nil {
		return controlPlaneError(cfg.Server, "heartbeat", err)
	}
	clockReceived := m.readClock()
	return m.applyHeartbeatReply(resp.Msg, sent, clockSent, clockReceived)
}

// heartbeat is the report a heartbeat sends: the node's address, capacity,
// runtimes (hello, the node-manager's), executions, warm pool and memory.
func (m *Manager) heartbeat(ctx context.Context, hello *privop.Hello, advertise string) *nodeapiv1.Heartbeat {
	hb := &nodeapiv1.Heartbeat{
		NodeId: m.cfg.NodeID, Address: advertise, Token: m.cfg.Token,
		Runtimes: hello.Runtimes, RuntimesPending: hello.Pending, RuntimeStatus: hello.Status,
		Cpus: int64(m.cfg.CPUs), MemoryMib: int64(m.cfg.MemoryMiB),
		Executions: nodev1.ExecutionsToWire(m.report(ctx)), Pools: nodev1.PoolStatusesToWire(m.PoolStatus(ctx)),
	}
	m.memory.fill(hb)
	return hb
}

// controlPlaneError is the error of a call to the control plane at server:
// its answer's class and reason (connecterr), and for a control plane that
// does not serve the Connect node API (its answer lacks
// nodev1.VersionHeader: it is older than this node) a FailedPrecondition
// that says to upgrade it.
func controlPlaneError(server, what string, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) && olderPeer(ce) {
		return fmt.Errorf("%w: %s: node speaks node API v%s (Connect), the control plane at %s speaks v1 (it answers %v %q): upgrade the control plane first",
			errdefs.ErrFailedPrecondition, what, nodev1.Version, server, ce.Code(), ce.Message())
	}
	err = connecterr.Decode(err)
	if errdefs.ClassOf(err) == nil {
		return fmt.Errorf("%s: control plane %s: %w: %w", what, server, errdefs.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: control plane %s: %w", what, server, err)
}

// olderPeer reports whether ce is the answer of a peer of node API v1: a
// refusal of the route (404: not found, or unimplemented) without the v2
// version header.
func olderPeer(ce *connect.Error) bool {
	return (ce.Code() == connect.CodeUnimplemented || ce.Code() == connect.CodeNotFound) && ce.Meta().Get(nodev1.VersionHeader) == ""
}

// applyHeartbeatReply applies what a heartbeat answer pushes, sent (and
// read on the clocks at clockSent and clockReceived) at sent.
func (m *Manager) applyHeartbeatReply(reply *nodeapiv1.HeartbeatReply, sent time.Time, clockSent, clockReceived clockReading) error {
	if ms := reply.GetFenceAfterMs(); ms < 0 || ms > maxFenceAfter.Milliseconds() {
		return fmt.Errorf("heartbeat answer: fence_after_ms %d out of range (0 to %d)", ms, maxFenceAfter.Milliseconds())
	}
	// Retirements first: an execution that a newer generation replaced
	// must not be thawed by anything that follows.
	m.Retire(nodev1.RetirementsFromWire(reply.GetRetire()))
	m.renewLease(sent, time.Duration(reply.GetFenceAfterMs())*time.Millisecond)
	var serverTime time.Time
	if ts := reply.GetServerTime(); ts != nil {
		serverTime = ts.AsTime()
	}
	m.measureClock(clockSent, clockReceived, serverTime)
	m.setCredential(reply.GetNodeCredential())
	if pools := nodev1.PoolTargetsFromWire(reply.GetPools()); pools != nil {
		m.SetPoolTargets(*pools)
	}
	var keysErr error
	if k := reply.GetKeys(); k != nil {
		ks, err := capability.ParseKeySet(k.GetVersion(), k.GetKeys())
		if err != nil {
			keysErr = fmt.Errorf("heartbeat answer: %w", err)
		} else {
			keysErr = m.SetKeys(ks)
		}
	}
	internal := reply.GetInternal()
	if internal == nil && m.cfg.Gateway != nil && m.InternalServicesVersion() == 0 && m.gateways.warnedNoList.CompareAndSwap(false, true) {
		m.log.Warn("the control plane sends no internal-service list: sandbox connections are refused until it does (docs/network.md)")
	}
	if internal != nil {
		// A list that does not parse leaves the one held (or none: every
		// connection refused); the keys were still taken.
		if err := m.SetInternalServices(InternalServices{Version: internal.GetVersion(), CIDRs: internal.GetCidrs()}); err != nil {
			return errors.Join(keysErr, fmt.Errorf("heartbeat answer: %w", err))
		}
	}
	return keysErr
}

// measureClock takes the clock measure of one answered heartbeat; a change
// of verdict is logged and told to the host bridges (clockVerdict).
func (m *Manager) measureClock(sent, received clockReading, server time.Time) {
	if m.clock.observe(sent, received, server) {
		m.clockVerdict()
	}
}
