package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/nodeclient"
	"github.com/spacesandbox/space/internal/nodefacing"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/scheduler"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// Nodes keeps a client per registered node. A node re-sends its token on
// every heartbeat, so a restarted control plane learns it again within one
// heartbeat interval; with Share, a replica also finds in the store (sealed)
// the tokens of nodes that report to other replicas (nodeshare.go).
type Nodes struct {
	mu      sync.Mutex // guards every field below
	clients map[string]*nodeclient.Client
	addrs   map[string]string
	// confirmed is when each client's address and token were last
	// confirmed: by a heartbeat here, or read from the store.
	confirmed map[string]time.Time
	// shared is where the registry is shared with other replicas; nil:
	// this replica only.
	shared *nodeShare
	// observed is the last execution list each node reported.
	observed map[string]observation
	// registered is closed (and replaced) whenever a node registers.
	registered chan struct{}
	// heard is when each node's heartbeat last reached this replica.
	heard map[string]time.Time
	// started is when this registry (this replica) started: a node whose
	// last report in the store is older may be restarting with it.
	started time.Time
	// memoryWarned holds the nodes whose inconsistent memory figures
	// were logged (once per node until they are consistent again).
	memoryWarned map[string]bool
}

type observation struct {
	at         time.Time
	executions []nodev1.Execution
	pools      []nodev1.PoolStatus
	// pending are the runtimes the node is bringing up (warmup.go).
	pending []string
	// status is the node's line per runtime (runtimeStatus).
	status map[string]string
	// memory is the node's memory as it reported it (nodeMemory).
	memory scheduler.Memory
}

// NewNodes returns an empty registry.
func NewNodes() *Nodes {
	return &Nodes{
		clients: map[string]*nodeclient.Client{}, addrs: map[string]string{}, confirmed: map[string]time.Time{},
		observed: map[string]observation{}, registered: make(chan struct{}), heard: map[string]time.Time{},
		started: time.Now(),
	}
}

// Register records (or refreshes) how to reach a node that sent a
// heartbeat.
func (n *Nodes) Register(id, addr, token string) error {
	n.mu.Lock()
	n.heard[id] = time.Now()
	n.mu.Unlock()
	return n.learn(id, addr, token)
}

// learn records how to reach a node.
func (n *Nodes) learn(id, addr, token string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.addrs[id] == addr+"\x00"+token {
		n.confirmed[id] = time.Now()
		return nil
	}
	c, err := nodeclient.New(addr, token)
	if err != nil {
		return err
	}
	n.clients[id], n.addrs[id], n.confirmed[id] = c, addr+"\x00"+token, time.Now()
	close(n.registered)
	n.registered = make(chan struct{})
	return nil
}

// clientWait is client, but right after a control plane restart it waits up
// to maxWait for the node's first heartbeat instead of failing at once.
func (n *Nodes) clientWait(ctx context.Context, id string, maxWait time.Duration) (*nodeclient.Client, error) {
	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	for {
		n.mu.Lock()
		next := n.registered
		n.mu.Unlock()
		if c, err := n.client(id); err == nil {
			return c, nil
		}
		select {
		case <-next:
		case <-timer.C:
			return n.client(id)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// waitHeartbeat waits up to maxWait for a heartbeat of node id that
// reaches this replica after since (a node restarting with the control
// plane is not listening yet, though the store knows its address).
func (n *Nodes) waitHeartbeat(ctx context.Context, id string, since time.Time, maxWait time.Duration) bool {
	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	for {
		n.mu.Lock()
		next, at := n.registered, n.heard[id]
		n.mu.Unlock()
		if at.After(since) {
			return true
		}
		// Register closes registered only when a node's address or token
		// changes; poll as well for a plain heartbeat.
		select {
		case <-next:
		case <-time.After(100 * time.Millisecond):
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// Client returns the client of a registered node.
func (n *Nodes) Client(id string) (*nodeclient.Client, error) { return n.client(id) }

func (n *Nodes) client(id string) (*nodeclient.Client, error) {
	n.mu.Lock()
	c, at, sh := n.clients[id], n.confirmed[id], n.shared
	n.mu.Unlock()
	if c != nil && (sh == nil || time.Since(at) < sharedClientTTL) {
		return c, nil
	}
	if sh != nil {
		fresh, err := n.fromStore(sh, id)
		switch {
		case err == nil:
			return fresh, nil
		case c != nil:
			return c, nil // the store did not answer: the last known client
		default:
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: node %q has not reported since the control plane started; retry shortly", errdefs.ErrUnavailable, id)
}

func (n *Nodes) observe(id string, execs []nodev1.Execution, pools []nodev1.PoolStatus, pending []string, status map[string]string, mem scheduler.Memory) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.observed[id] = observation{at: time.Now(), executions: execs, pools: pools, pending: knownRuntimes(pending), status: runtimeStatus(status), memory: mem}
}

// warnMemory logs, once per node, that its memory figures were dropped.
func (n *Nodes) warnMemory(log *slog.Logger, id string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.memoryWarned[id] {
		return
	}
	if n.memoryWarned == nil {
		n.memoryWarned = map[string]bool{}
	}
	n.memoryWarned[id] = true
	log.Warn("node memory figures inconsistent", "node", id, "err", err)
}

// NodeMemory maps each node whose heartbeat reached this replica within
// scheduler.HeartbeatTimeout to its memory as it reported it
// (service.Heartbeats); a node not heard from is absent: unreported. Each
// replica knows the nodes that report to it.
func (n *Nodes) NodeMemory() map[string]scheduler.Memory {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]scheduler.Memory, len(n.observed))
	for id, obs := range n.observed {
		if time.Since(obs.at) < scheduler.HeartbeatTimeout {
			out[id] = obs.memory
		}
	}
	return out
}

// maxMemoryPressure bounds a node's memory pressure reason.
const maxMemoryPressure = 200

// nodeMemory is the memory hb reports: figures that contradict each other
// (a total of 0, available below 0 or above the total) are dropped as
// unreported, and the pressure reason, shown to admins and in refusals, is
// cut to maxMemoryPressure bytes of printable ASCII. A reason is kept even
// without figures: pressure errs on the side of refusing.
func nodeMemory(hb *nodeapiv1.Heartbeat) (scheduler.Memory, error) {
	m := scheduler.Memory{Pressure: printable(hb.GetMemoryPressure(), maxMemoryPressure)}
	if !hb.GetMemoryMeasured() {
		return m, nil
	}
	total, avail := hb.GetMemoryTotalMib(), hb.GetAvailableMib()
	if total <= 0 || avail < 0 || avail > total || total > math.MaxInt32 {
		return m, fmt.Errorf("node %s reports %d MiB available of %d MiB: figures ignored (the node is placed on by its committed memory alone)", hb.GetNodeId(), avail, total)
	}
	m.Measured, m.TotalMiB, m.AvailableMiB = true, int(total), int(avail)
	return m, nil
}

// printable is s cut to max bytes of printable ASCII.
func printable(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, s)
	if len(s) > max {
		s = s[:max]
	}
	return s
}

// RuntimeStatus returns each node's line per runtime, as last reported.
func (n *Nodes) RuntimeStatus() map[string]map[string]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]map[string]string, len(n.observed))
	for id, obs := range n.observed {
		out[id] = obs.status
	}
	return out
}

// maxRuntimeStatus bounds a runtime's status line from a node.
const maxRuntimeStatus = 200

// runtimeStatus keeps the lines of the runtimes this server knows, cut to
// maxRuntimeStatus bytes of printable ASCII: a node's heartbeat is shown to
// admins, and neither grows the server's memory nor writes control bytes
// to their terminals.
func runtimeStatus(in map[string]string) map[string]string {
	var out map[string]string
	for _, name := range knownRuntimes(slices.Sorted(maps.Keys(in))) {
		line := printable(in[name], maxRuntimeStatus)
		if line == "" {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = line
	}
	return out
}

// NodeHeartbeat registers (or refreshes) the node of hb and records what it
// reports; the reply pushes the keys the node verifies capabilities with,
// retires the executions that no longer serve their sandbox, and says what
// the node's warm pool should hold (nodefacing.ControlPlane). The caller
// checked the join token.
func (s *Server) NodeHeartbeat(ctx context.Context, from nodefacing.Origin, hb *nodeapiv1.Heartbeat) (*nodeapiv1.HeartbeatReply, error) {
	id := hb.GetNodeId()
	if !service.ValidNodeID(id) {
		return nil, fmt.Errorf("%w: node id %q: want 1-63 of [a-z0-9-]", errdefs.ErrInvalidArgument, clip(id))
	}
	if hb.GetToken() == "" || hb.GetAddress() == "" {
		return nil, fmt.Errorf("%w: heartbeat needs address and token", errdefs.ErrInvalidArgument)
	}
	if err := s.nodes.Register(id, hb.GetAddress(), hb.GetToken()); err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	now := time.Now().UTC()
	execs := nodev1.ExecutionsFromWire(hb.GetExecutions())
	// What the node is bringing up is known before the store makes it
	// live: a create in between would see a live node without vm, neither
	// offered nor coming, and refuse (warmup.go). The runtimes it offers
	// count as coming too: in the heartbeat where vm moves from pending to
	// offered, the store still says the node lacks vm until
	// recordHeartbeat below, and a create in that window must wait for it
	// (stateOf looks at the store's runtimes first).
	mem, err := nodeMemory(hb)
	if err != nil {
		s.nodes.warnMemory(s.log, id, err)
	}
	coming := append(slices.Clone(hb.GetRuntimesPending()), hb.GetRuntimes()...)
	s.nodes.observe(id, execs, nodev1.PoolStatusesFromWire(hb.GetPools()), coming, hb.GetRuntimeStatus(), mem)
	if err := s.recordHeartbeat(ctx, id, hb, now); err != nil {
		return nil, err
	}
	if err := s.nodes.report(ctx, id, hb.GetToken(), execs, now); err != nil {
		return nil, err
	}
	s.internal.heartbeat(from, hb.GetAddress())
	s.rec.Observe(id, execs)
	if mem.Pressure != "" {
		// One sandbox per heartbeat: the node says again whether the
		// pressure lasts.
		if sb, err := s.rec.RelievePressure(ctx, id, mem.Pressure); err != nil {
			s.log.Warn("memory pressure: could not pause an idle sandbox", "node", id, "err", err)
		} else if sb != "" {
			s.log.Info("memory pressure: idle sandbox paused or hibernated ahead of its idle timeout", "node", id, "sandbox", sb, "reason", mem.Pressure)
		}
	}
	internal := s.internal.current()
	reply := &nodeapiv1.HeartbeatReply{
		Retire:         nodev1.RetirementsToWire(s.retirements(ctx, id, execs)),
		Pools:          nodev1.PoolTargetsToWire(s.poolTargets(ctx, id, hb.GetRuntimes())),
		FenceAfterMs:   s.rec.FenceAfter().Milliseconds(),
		Internal:       &nodeapiv1.InternalServices{Version: internal.Version, Cidrs: internal.CIDRs},
		NodeCredential: s.nodeCredential(id),
	}
	if ks := s.keySet(); ks != nil {
		reply.Keys = &nodeapiv1.KeySet{Version: ks.Version, Keys: map[string][]byte{}}
		for kid, k := range ks.Keys {
			reply.Keys.Keys[kid] = k
		}
	}
	// Last: as close to the write as can be.
	reply.ServerTime = timestamppb.Now()
	return reply, nil
}

// retirements lists the executions a node reports that are not their
// sandbox's current one: a newer generation (or none: the sandbox is gone)
// serves it. A store error retires nothing. One read of the node's
// sandboxes answers for every execution whose sandbox is still placed on the
// node; only a sandbox that moved or is gone is read by id, so a heartbeat's
// reads do not grow with the sandboxes it reports
// (TestHeartbeatRetirementsReadTheStoreOnce).
func (s *Server) retirements(ctx context.Context, nodeID string, execs []nodev1.Execution) []nodev1.Retirement {
	if len(execs) == 0 {
		return nil
	}
	var onNode map[string]*sandbox.Sandbox
	if sbs, err := s.store.ListSandboxes(ctx, store.SandboxFilter{Node: nodeID}); err == nil {
		onNode = make(map[string]*sandbox.Sandbox, len(sbs))
		for _, sb := range sbs {
			onNode[sb.ID] = sb
		}
	}
	var out []nodev1.Retirement
	for _, ex := range execs {
		sb, err := onNode[ex.SandboxID], error(nil)
		if sb == nil {
			sb, err = s.store.GetSandboxByID(ctx, ex.SandboxID)
		}
		switch {
		case errors.Is(err, errdefs.ErrNotFound):
			out = append(out, nodev1.Retirement{ExecID: ex.ExecID, SandboxID: ex.SandboxID})
		case err != nil:
			continue
		case sb.Generation > ex.Generation || sb.Generation == ex.Generation && sb.ExecID != ex.ExecID && sb.ExecID != "":
			out = append(out, nodev1.Retirement{ExecID: ex.ExecID, SandboxID: ex.SandboxID, Generation: sb.Generation})
		case sb.State == sandbox.StateFailed && sb.ExecID == ex.ExecID:
			// A failed sandbox's execution serves nothing (its node may
			// have been declared lost meanwhile); the reconciler stops it.
			out = append(out, nodev1.Retirement{ExecID: ex.ExecID, SandboxID: ex.SandboxID, Generation: sb.Generation})
		}
	}
	return out
}

// nodeList is the registered nodes as GET /v1/nodes shows them
// (restapi.Host.Nodes).
func (s *Server) nodeList(ctx context.Context) ([]sandboxv1.Node, error) {
	nodes, err := s.store.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	occ, err := s.occupancy(ctx)
	if err != nil {
		return nil, err
	}
	usage, err := s.store.NodeUsage(ctx)
	if err != nil {
		return nil, err
	}
	out := []sandboxv1.Node{}
	now := time.Now()
	pools, status, mem := s.nodes.Pools(), s.nodes.RuntimeStatus(), s.nodes.NodeMemory()
	for _, n := range nodes {
		api := apiNode(n, pools[n.ID], now, occ[n.ID])
		api.RuntimeStatus = status[n.ID]
		s.setNodeMemory(&api, usage[n.ID], mem[n.ID])
		out = append(out, api)
	}
	return out, nil
}

// setNodeMemory sets api's memory figures: what its sandboxes commit (u),
// what they may, and what the node measured (m; unreported: -1).
func (s *Server) setNodeMemory(api *sandboxv1.Node, u store.Usage, m scheduler.Memory) {
	api.CommittedMiB = u.MemoryMiB
	api.MemoryLimitMiB = scheduler.Overcommit{Ratio: s.cfg.MemoryOvercommit}.LimitMiB(api.MemoryMiB)
	api.MemoryMeasured, api.MemoryTotalMiB, api.AvailableMiB, api.UsedMiB = false, -1, -1, -1
	if m.Measured {
		api.MemoryMeasured, api.MemoryTotalMiB, api.AvailableMiB, api.UsedMiB = true, m.TotalMiB, m.AvailableMiB, m.TotalMiB-m.AvailableMiB
	}
	api.MemoryPressure = m.Pressure
}

// apiNode is n as the REST API reports it.
func apiNode(n store.Node, pools []nodev1.PoolStatus, now time.Time, o occupancy) sandboxv1.Node {
	api := sandboxv1.Node{
		ID: n.ID, State: string(n.State), Runtimes: n.Runtimes, CPUs: n.Capacity.CPUs, MemoryMiB: n.Capacity.MemoryMiB,
		LastHeartbeat: n.LastHeartbeat, Live: n.State == store.NodeReady && now.Sub(n.LastHeartbeat) < scheduler.HeartbeatTimeout,
		Sandboxes: o.sandboxes, StoppedOnNode: o.stopped,
	}
	for _, p := range pools {
		api.WarmPool = append(api.WarmPool, sandboxv1.WarmPoolStatus{
			Template: p.Template, Runtime: p.Runtime, CPUs: p.CPUs, MemoryMiB: p.MemoryMiB,
			Ready: p.Ready, Filling: p.Filling, Hits: p.Hits, Misses: p.Misses, MemoryBytes: p.MemoryBytes,
		})
	}
	return api
}
