package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/capability"
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

// heartbeat mirrors server.Heartbeat; the node does not import server code.
type heartbeat struct {
	Address  string   `json:"address"`
	Token    string   `json:"token"`
	Runtimes []string `json:"runtimes"`
	// RuntimesPending are being set up: the control plane waits for them.
	RuntimesPending []string `json:"runtimes_pending,omitempty"`
	// RuntimeStatus is the node-manager's line per runtime (privop.Hello).
	RuntimeStatus map[string]string   `json:"runtime_status,omitempty"`
	CPUs          int                 `json:"cpus"`
	MemoryMiB     int                 `json:"memory_mib"`
	DiskMiB       int                 `json:"disk_mib"`
	Executions    []nodev1.Execution  `json:"executions"`
	Pools         []nodev1.PoolStatus `json:"pools,omitempty"`
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
	client := &http.Client{Timeout: 10 * time.Second}
	url := strings.TrimRight(cfg.Server, "/") + "/internal/v1/nodes/" + m.cfg.NodeID + "/heartbeat"
	failures := 0
	for {
		if err := m.sendHeartbeat(ctx, client, url, cfg); err != nil && ctx.Err() == nil {
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

func (m *Manager) sendHeartbeat(ctx context.Context, client *http.Client, url string, cfg HeartbeatConfig) error {
	hello, err := m.cfg.Privileged.Hello(ctx)
	if err != nil {
		return fmt.Errorf("node-manager: %w", err)
	}
	hb := heartbeat{
		Address: cfg.Advertise, Token: m.cfg.Token, Runtimes: hello.Runtimes, RuntimesPending: hello.Pending,
		RuntimeStatus: hello.Status,
		CPUs:          m.cfg.CPUs, MemoryMiB: m.cfg.MemoryMiB, Executions: m.List(ctx),
		Pools: m.PoolStatus(ctx),
	}
	body, _ := json.Marshal(hb)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+cfg.JoinToken)
	// The lease an answer renews runs from now: before the control plane
	// saw the heartbeat, so the node's lease ends before its count does.
	sent := time.Now()
	clockSent := m.readClock()
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	clockReceived := m.readClock()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	var reply struct {
		Keys   *capability.KeySet  `json:"keys"`
		Retire []nodev1.Retirement `json:"retire"`
		// Pools is what the warm pool should hold; absent (an older
		// control plane) leaves it as it is.
		Pools *[]nodev1.PoolTarget `json:"pools"`
		// FenceAfterMS is the heartbeat lease (fence.go); 0 or absent:
		// the node does not fence itself.
		FenceAfterMS int64 `json:"fence_after_ms"`
		// Internal is the deployment's internal-service list; absent (an
		// older control plane) leaves the list as it is.
		Internal *InternalServices `json:"internal"`
		// ServerTime is the control plane's clock as it wrote the
		// answer: the node measures its own against it (clock.go).
		ServerTime time.Time `json:"server_time"`
		// NodeCredential is this node's own credential (nodecred.go);
		// absent (an older control plane): the one held is kept.
		NodeCredential string `json:"node_credential"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&reply); err != nil {
		return fmt.Errorf("heartbeat answer: %w", err)
	}
	if reply.FenceAfterMS < 0 || reply.FenceAfterMS > maxFenceAfter.Milliseconds() {
		return fmt.Errorf("heartbeat answer: fence_after_ms %d out of range (0 to %d)", reply.FenceAfterMS, maxFenceAfter.Milliseconds())
	}
	// Retirements first: an execution that a newer generation replaced
	// must not be thawed by anything that follows.
	m.Retire(reply.Retire)
	m.renewLease(sent, time.Duration(reply.FenceAfterMS)*time.Millisecond)
	m.measureClock(clockSent, clockReceived, reply.ServerTime)
	m.setCredential(reply.NodeCredential)
	if reply.Pools != nil {
		m.SetPoolTargets(*reply.Pools)
	}
	var keysErr error
	if reply.Keys != nil {
		keysErr = m.SetKeys(reply.Keys)
	}
	if reply.Internal == nil && m.cfg.Gateway != nil && m.InternalServicesVersion() == 0 && m.gateways.warnedNoList.CompareAndSwap(false, true) {
		m.log.Warn("the control plane sends no internal-service list (it is older than this node): sandbox connections are refused until it is upgraded (docs/network.md)")
	}
	if reply.Internal != nil {
		// A list that does not parse leaves the one held (or none: every
		// connection refused); the keys were still taken.
		if err := m.SetInternalServices(*reply.Internal); err != nil {
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
