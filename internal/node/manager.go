// Package node is the sandbox manager of one node (node-api): it starts and stops
// sandbox executions through the root node-manager, runs one host bridge per
// execution, keeps a node-local runtime record of each, reports what it observes,
// and forwards authorised guest traffic to the right bridge. It never needs root.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/bridge"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/guesttext"
	"github.com/spacesandbox/space/internal/keylock"
	"github.com/spacesandbox/space/internal/kms"
	"github.com/spacesandbox/space/internal/mempressure"
	"github.com/spacesandbox/space/internal/metrics"
	"github.com/spacesandbox/space/internal/objstore"
	"github.com/spacesandbox/space/internal/privop"
)

// Config wires a sandbox manager.
type Config struct {
	NodeID  string
	DataDir string
	// Privileged is the client of this node's node-manager.
	Privileged *privop.Client
	// HostBridge is the space-host-bridge binary, started once per
	// execution.
	HostBridge string
	// Token is the bearer token the control plane presents.
	Token string
	// CPUs and MemoryMiB are the capacity the node offers.
	CPUs      int
	MemoryMiB int
	// BridgeReadyTimeout bounds the wait for a new execution's guest.
	BridgeReadyTimeout time.Duration
	// Objects is the object store hibernated snapshots go to, and KMS
	// wraps their data keys; without them the node cannot hibernate or
	// restore.
	Objects objstore.Store
	KMS     kms.KMS
	// Gateway, when set, gives every execution a network interface into
	// this node's gateway.
	Gateway *GatewayConfig
	// MaxStreamsPerExecution bounds the requests the node forwards to one
	// execution at once (0: DefaultMaxStreamsPerExecution); the next is
	// refused 429 too_many_streams.
	MaxStreamsPerExecution int
	// Memory measures the node's memory and pressure for every heartbeat
	// (nil: the node reports none, and admission goes by the committed
	// sum alone).
	Memory *mempressure.Monitor
	// ExtraMetrics, when set, writes metrics of the node's process that
	// the Manager does not own on GET /node/v1/metrics (space server
	// --dev: its node-manager's restarts).
	ExtraMetrics func(io.Writer)
}

// defaultStatusRefresh is Manager.statusRefresh: the heartbeat asks the
// bridge of an execution that runs, and is not known to have changed, once
// per 30 s instead of every heartbeat.
const defaultStatusRefresh = 30 * time.Second

// How the heartbeat knew an execution's state: the status label of
// space_node_heartbeat_executions_total.
const (
	reportHeld  = "held"
	reportAsked = "asked"
)

// Manager runs sandbox executions on this node.
type Manager struct {
	cfg     Config
	log     *slog.Logger
	records records
	locks   keylock.Map
	// refusals counts the requests and bridge peers this node refused.
	refusals *refusalMetrics
	// guestErrors counts the guests' protocol errors.
	guestErrors *guestErrorMetrics
	// verifier checks the capabilities of guest requests; it verifies
	// each token's signature once per key set (capability.Verifier).
	verifier capability.Verifier

	mu      sync.Mutex // guards bridges and starting
	bridges map[string]*bridgeConn
	// starting holds the executions whose Start is under way: they are
	// reported as starting, not judged by a bridge that is not up yet.
	starting map[string]bool
	// lastStart is when a Start last began or ended (the warm pool waits
	// for quiet before it prepares more).
	lastStart time.Time
	// changed wakes the heartbeat loop early when an execution ends, so the
	// control plane learns of a dead sandbox in well under a second.
	changed chan struct{}
	// statusRefresh is how long a bridge's answer that its execution runs
	// stands in the heartbeat's report while its process lives (report).
	statusRefresh time.Duration
	// reported counts the executions the heartbeat reported, by how their
	// state was known: "held" (a held answer), "asked" (a round trip).
	reported *metrics.CounterVec

	// streams holds the leases of forwarded guest requests per execution.
	streams leases

	// gateways are the executions' network gateways.
	gateways gateways

	// pool holds the executions prepared ahead of creates (pool.go).
	pool warmPool

	// fence is the heartbeat lease that keeps a node cut off from the
	// control plane from running sandboxes recovered elsewhere (fence.go).
	fence fence
	// pauser freezes and thaws executions: the node-manager (tests
	// replace it).
	pauser pauser

	keysMu sync.Mutex // guards keys
	// keys verify the capabilities requests carry; pushed by the control
	// plane with every heartbeat answer and kept across restarts.
	keys *capability.KeySet

	// clock is the latest measure of this node's clock against the
	// control plane's (clock.go); testOffset shifts the node's clock in
	// tests only.
	clock      clockAgreement
	testOffset testClockOffset
	// clockSource replaces readClock in tests; nil: the real clocks.
	clockSource func() clockReading
	// clockPushMu serialises pushes of the clock verdict to the bridges.
	clockPushMu sync.Mutex
	// credential is this node's own credential, from the control plane's
	// heartbeat answers (nodecred.go).
	credential atomic.Pointer[string]
	// serving is closed once Serve listens: heartbeats, which register
	// the node with the control plane, wait for it, so nothing is sent
	// to a node API that is not there yet.
	serving     chan struct{}
	servingOnce sync.Once
	// memory reports the node's memory in its heartbeats (memory.go).
	memory memoryReport
}

// NewManager returns a manager over cfg.DataDir/node.
func NewManager(cfg Config, log *slog.Logger) (*Manager, error) {
	if cfg.NodeID == "" || cfg.DataDir == "" || cfg.Privileged == nil || cfg.HostBridge == "" {
		return nil, errors.New("node: node id, data dir, node-manager client and host bridge binary are required")
	}
	if cfg.BridgeReadyTimeout == 0 {
		cfg.BridgeReadyTimeout = 60 * time.Second
	}
	dir := filepath.Join(cfg.DataDir, "node", "execs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("node: state dir: %w", err)
	}
	m := &Manager{cfg: cfg, log: log, records: records{dir: dir, cache: newRecordCache()}, refusals: newRefusalMetrics(), guestErrors: newGuestErrorMetrics(), bridges: map[string]*bridgeConn{}, starting: map[string]bool{}, changed: make(chan struct{}, 1), statusRefresh: defaultStatusRefresh, pauser: cfg.Privileged,
		reported: metrics.NewCounterVec("space_node_heartbeat_executions_total",
			"Executions the node's heartbeats reported, by how each one's state was known: held (the bridge's last answer, its process alive) or asked (a status round trip to its bridge).", "status").Always(reportHeld, reportAsked),
		serving: make(chan struct{})}
	m.streams.max, m.streams.refused = cfg.MaxStreamsPerExecution, m.refusals.streams
	m.pool.init()
	m.memory = memoryReport{monitor: cfg.Memory, log: log}
	m.testOffset.path = os.Getenv(TestClockOffsetEnv)
	logTestClockOffset(log, m.testOffset.path)
	m.loadKeys()
	m.loadFence()
	return m, nil
}

// Start starts an execution and returns once its guest is ready and its
// identity installed. Starting an execution that already runs returns it.
func (m *Manager) Start(ctx context.Context, req nodev1.StartExecution) (*nodev1.Execution, error) {
	if err := validSandboxExecID(req.ExecID); err != nil {
		return nil, err
	}
	unlock := m.locks.Lock(req.ExecID)
	defer unlock()
	if rec, err := m.records.load(req.ExecID); err == nil {
		if rec.SandboxID != req.SandboxID {
			return nil, fmt.Errorf("%w: exec %s belongs to another sandbox", errdefs.ErrConflict, req.ExecID)
		}
		ex := m.observe(ctx, rec)
		return &ex, nil
	}
	if m.leaseEnded(time.Now()) {
		return nil, m.errFenced()
	}
	m.setStarting(req.ExecID, true)
	defer m.setStarting(req.ExecID, false)
	// A newer generation of the sandbox is installed here: the older ones
	// stop serving it before the new one starts.
	m.retireOlder(req)
	if rec, ok := m.claimWarm(ctx, req); ok {
		ex := m.observe(ctx, rec)
		ex.StartNotReady = rec.startNotReady
		return &ex, nil
	}
	if err := os.MkdirAll(m.records.execDir(req.ExecID), 0o700); err != nil {
		return nil, fmt.Errorf("exec %s: state dir: %w", req.ExecID, err)
	}
	rec, err := m.start(ctx, req)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		m.teardown(cctx, req.ExecID, req.Runtime)
		return nil, err
	}
	ex := m.observe(ctx, rec)
	ex.StartNotReady = rec.startNotReady
	return &ex, nil
}

func (m *Manager) start(ctx context.Context, req nodev1.StartExecution) (*Record, error) {
	t0 := time.Now()
	started, channel, link, err := m.cfg.Privileged.Start(ctx, privop.StartArgs{
		ExecID:    req.ExecID,
		SandboxID: req.SandboxID,
		Template:  req.Template,
		Runtime:   req.Runtime,
		Hostname:  req.SandboxID,
		CPUs:      req.CPUs,
		MemoryMiB: req.MemoryMiB,
		PidsMax:   pidsFor(req.MemoryMiB),
		DiskMiB:   req.DiskMiB,
		Snapshot:  req.Snapshot,
		Network:   m.cfg.Gateway != nil,
	})
	if err != nil {
		return nil, err
	}
	failpoint.StartAfterRuntime.Hit()
	defer channel.Close()
	rec := &Record{StartExecution: req, SandboxPid: started.Pid, SandboxStartTime: started.StartTime, StartedAt: time.Now().UTC()}
	// The gateway is up before the guest runs anything of the caller's.
	if err := m.attachGateway(rec, link); err != nil {
		return nil, err
	}
	tStarted := time.Now()
	if err := m.spawnBridge(rec, channel); err != nil {
		return nil, err
	}
	tSpawned := time.Now()
	rec.Starting = true
	if err := m.records.save(rec); err != nil {
		return nil, err
	}
	failpoint.StartAfterBridge.Hit()
	bc, err := m.bridge(rec)
	if err != nil {
		return nil, err
	}
	if err := bc.waitReady(ctx, m.cfg.BridgeReadyTimeout); err != nil {
		return nil, fmt.Errorf("exec %s: %w%s", req.ExecID, err, m.bridgeLogTail(req.ExecID))
	}
	tReady := time.Now()
	// The bridge admits requests itself: it needs the keys and the clock
	// verdict, then the identity Init installs.
	if err := m.pushAdmission(ctx, bc); err != nil {
		return nil, fmt.Errorf("exec %s: %w", req.ExecID, err)
	}
	note, err := m.installIdentity(ctx, bc, req)
	if err != nil {
		return nil, err
	}
	rec.startNotReady = note
	rec.Starting = false
	if err := m.records.save(rec); err != nil {
		return nil, err
	}
	m.log.Debug("execution started", "exec", req.ExecID,
		"runtime_start", tStarted.Sub(t0), "bridge_spawn", tSpawned.Sub(tStarted),
		"guest_ready", tReady.Sub(tSpawned), "identity", time.Since(tReady))
	return rec, nil
}

// installIdentity makes a started guest req's: its identity (which the
// bridge admits capabilities against), environment, defaults and fresh
// entropy (Init), then the sandbox's interception CA, before anything of
// the caller's runs. It returns why the template's start command was not
// ready, if it was not (guest text, escaped: guesttext.Escape).
func (m *Manager) installIdentity(ctx context.Context, bc *bridgeConn, req nodev1.StartExecution) (string, error) {
	t0 := time.Now()
	// One bridge request: Init, and the CA, which the bridge has the guest
	// trust at the same time; both are done before the caller gets the
	// sandbox.
	init := bridge.InitRequest{
		SandboxID:      req.SandboxID,
		Generation:     req.Generation,
		ActivationID:   req.ActivationID,
		Node:           m.cfg.NodeID,
		Substrate:      req.Runtime,
		Hostname:       req.SandboxID,
		Env:            guestEnv(req),
		DefaultUser:    "user",
		DefaultWorkdir: "/home/user",
		PidsMax:        guestPidsMax(req),
	}
	if req.CA != nil && m.cfg.Gateway != nil {
		init.CACertPEM = req.CA.CertPEM
	}
	res, err := bc.init(ctx, init)
	if err != nil {
		return "", fmt.Errorf("exec %s: %w", req.ExecID, err)
	}
	m.log.Debug("identity installed", "exec", req.ExecID, "took", time.Since(t0), "ca", init.CACertPEM != "")
	if res.StartNotReady != "" {
		m.log.Warn("template start command not ready", "exec", req.ExecID, "note", res.StartNotReady)
	}
	return guesttext.Escape(res.StartNotReady), nil
}

// guestEnv is the sandbox's environment: the caller's, and, when the
// sandbox has an interception CA, the variables that make common TLS
// clients read the system bundle it was added to (unless the caller set
// them).
func guestEnv(req nodev1.StartExecution) map[string]string {
	if req.CA == nil {
		return req.Env
	}
	env := make(map[string]string, len(req.Env)+4)
	for k, v := range map[string]string{
		"SSL_CERT_FILE":       bridge.TrustBundlePath,
		"REQUESTS_CA_BUNDLE":  bridge.TrustBundlePath,
		"CURL_CA_BUNDLE":      bridge.TrustBundlePath,
		"NODE_EXTRA_CA_CERTS": bridge.TrustAnchorPath,
	} {
		env[k] = v
	}
	for k, v := range req.Env {
		env[k] = v
	}
	return env
}

// guestPidsMax is the task limit the guest enforces itself: in a VM nothing
// on the host does (the ns runtime's cgroup does it from outside).
func guestPidsMax(req nodev1.StartExecution) uint32 {
	if req.Runtime != "vm" {
		return 0
	}
	return uint32(pidsFor(req.MemoryMiB))
}

// pidsFor picks a process limit that scales with memory: enough for real work,
// few enough that a fork bomb stays contained.
func pidsFor(memoryMiB int) int {
	n := memoryMiB * 2
	return min(max(n, 256), 16384)
}

// spawnBridge starts space-host-bridge for rec with the guest channel as fd 3,
// in its own session so it outlives this process, and records the bridge's
// identity in rec: pid, start time and the device and inode of the file it
// runs, which every connection to it is checked against (bridgeconn.go).
//
// For a vm execution the bridge is also told the VMM's pid and start time
// (rec.SandboxPid, rec.SandboxStartTime): the channel is a connection to the
// socket QEMU listens on, and the bridge refuses to serve it unless its peer
// is that process. An ns channel is a socketpair the node-manager made; its
// peer credentials name the node-manager and no other process can reach it,
// so it is not checked (see internal/bridge/peer.go).
// BridgeMaxFiles is the RLIMIT_NOFILE (soft and hard) of every host bridge:
// room for its DefaultMaxStreams guest requests (bridge.DefaultMaxStreams)
// and their connections, and no more, so a sandbox whose clients open
// streams without end exhausts its own bridge's fds, not the node's.
const BridgeMaxFiles = 4096

// BridgeMemoryLimit is the GOMEMLIMIT of every host bridge: the heap its
// garbage collector keeps under. A bridge holds at most
// guest.MaxInFlightBytes of its guest's answers (32 MiB), plus a
// bridge.CopyBufferSize buffer for each of its bridge.DefaultMaxStreams
// requests (256 MiB when all 1,024 are open); this leaves room for both.
const BridgeMemoryLimit = 320 << 20

// BridgeMaxData is the RLIMIT_DATA (soft and hard) of every host bridge:
// the private writable memory it may map, its hard memory bound. Past it
// an allocation fails and the bridge exits, ending its own execution's
// channel and no other. The Go runtime maps some 70 MiB of this at start
// (its heap arena index); the rest is heap and stacks. A cgroup would need
// the node-manager (the node runs unprivileged), a limit on the process
// does not.
const BridgeMaxData = 768 << 20

func (m *Manager) spawnBridge(rec *Record, channel *os.File) error {
	logf, err := os.OpenFile(m.records.logFile(rec.ExecID), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("exec %s: bridge log: %w", rec.ExecID, err)
	}
	defer logf.Close()
	// The bridge runs in the execution's directory and names its files
	// relative to it: a prepared execution's directory is renamed when a
	// sandbox claims it, and the bridge's socket and exit file move along.
	args := []string{"--exec-id", rec.ExecID,
		"--socket", filepath.Base(m.records.socket(rec.ExecID)),
		"--exit-file", filepath.Base(m.records.exitFile(rec.ExecID)),
		"--errors-file", bridge.ProtocolErrorsFile,
		"--guest-fd", "3"}
	if rec.Runtime == "vm" {
		args = append(args,
			"--guest-pid", strconv.Itoa(rec.SandboxPid),
			"--guest-start-time", strconv.FormatUint(rec.SandboxStartTime, 10))
	}
	cmd := exec.Command(m.cfg.HostBridge, args...)
	cmd.ExtraFiles = []*os.File{channel}
	cmd.Dir = m.records.execDir(rec.ExecID)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GOMEMLIMIT=" + strconv.Itoa(BridgeMemoryLimit)}
	// A node armed with host-bridge failpoints (tests) arms every bridge
	// it spawns with them.
	cmd.Env = append(cmd.Env, failpoint.ChildEnv(failpoint.Bridge)...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("exec %s: start host bridge: %w", rec.ExecID, err)
	}
	// The bridge holds a socket per guest request it carries: its own fd
	// limit keeps one sandbox's flood from the node's fd table.
	// Its memory limit keeps a sandbox's flood from the node's memory.
	if err := limitBridge(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("exec %s: %w", rec.ExecID, err)
	}
	// Start returned after the exec: /proc/<pid>/exe is the file the bridge
	// runs, whatever happens to m.cfg.HostBridge's path from now on.
	rec.BridgePid = cmd.Process.Pid
	rec.BridgeStartTime, rec.BridgeExeDev, rec.BridgeExeIno, err = bridgeIdentity(cmd.Process.Pid)
	if err != nil {
		// Most likely the bridge exited at once; its log says why.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("exec %s: host bridge identity: %w%s", rec.ExecID, err, m.bridgeLogTail(rec.ExecID))
	}
	// The connection to it logs refused peers (m.bridge finds it).
	bc := m.connectBridge(rec)
	m.mu.Lock()
	if old := m.bridges[rec.ExecID]; old != nil {
		old.close()
	}
	m.bridges[rec.ExecID] = bc
	m.mu.Unlock()
	// Reap the bridge if it exits while this process lives (after a restart
	// of this process its parent is init), count what its guest broke, and
	// report the change at once.
	go func() {
		if err := cmd.Wait(); err != nil {
			// Its log says why, when its directory is still there.
			m.log.Info("host bridge exited", "exec", rec.ExecID, "pid", cmd.Process.Pid, "status", err.Error(),
				"log", strings.TrimPrefix(m.bridgeLogTail(rec.ExecID), "; host bridge log: "))
		}
		m.countProtocolErrors(bc)
		m.notifyChanged()
	}()
	return nil
}

// limitBridge sets the resource limits of the host bridge pid: its open
// files (BridgeMaxFiles) and its memory (BridgeMaxData).
func limitBridge(pid int) error {
	for _, l := range []struct {
		what     string
		resource int
		n        uint64
	}{
		{"open files", unix.RLIMIT_NOFILE, BridgeMaxFiles},
		{"data memory", unix.RLIMIT_DATA, BridgeMaxData},
	} {
		lim := unix.Rlimit{Cur: l.n, Max: l.n}
		if err := unix.Prlimit(pid, l.resource, &lim, nil); err != nil {
			return fmt.Errorf("limit the host bridge's %s to %d: %w", l.what, l.n, err)
		}
	}
	return nil
}

// bridgeLogTail returns the end of an execution's bridge log for an error
// message, or "".
func (m *Manager) bridgeLogTail(execID string) string {
	b, err := os.ReadFile(m.records.logFile(execID))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 1024 {
		b = b[len(b)-1024:]
	}
	return "; host bridge log: " + strings.TrimSpace(string(b))
}

// PauseResume freezes (pause true) or thaws an execution in place; the
// execution and its identity stay the same. Repeating either is harmless.
func (m *Manager) PauseResume(ctx context.Context, execID string, pause bool) error {
	if err := validSandboxExecID(execID); err != nil {
		return err
	}
	unlock := m.locks.Lock(execID)
	defer unlock()
	rec, err := m.records.load(execID)
	if err != nil {
		return fmt.Errorf("%w: exec %s is not on this node", errdefs.ErrNotFound, execID)
	}
	if !pause && m.leaseEnded(time.Now()) {
		return m.errFenced()
	}
	if pause {
		err = m.pauser.Pause(ctx, rec.physicalID(), rec.Runtime)
	} else {
		err = m.pauser.Resume(ctx, rec.physicalID(), rec.Runtime)
	}
	if err != nil {
		return err
	}
	m.forgetStatus(execID)
	// Either way the execution is no longer frozen by the fence: thawed by
	// the control plane, or paused by its sandbox's owner (and thawed only
	// by a resume).
	if rec.Paused != pause || rec.Fenced {
		rec.Paused, rec.Fenced = pause, false
		return m.records.save(rec)
	}
	return nil
}

// pauser freezes and thaws executions by the node-manager's id for them.
type pauser interface {
	Pause(ctx context.Context, execID, runtime string) error
	Resume(ctx context.Context, execID, runtime string) error
}

// forgetStatus drops the held status of execID's bridge (a pause or a
// resume changed the execution): the next heartbeat asks it.
func (m *Manager) forgetStatus(execID string) {
	m.mu.Lock()
	bc := m.bridges[execID]
	m.mu.Unlock()
	if bc != nil {
		bc.forget()
	}
}

func (m *Manager) notifyChanged() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// Stop stops an execution and releases everything it held. Stopping an unknown
// execution succeeds.
func (m *Manager) Stop(ctx context.Context, execID string) error {
	if err := validSandboxExecID(execID); err != nil {
		return err
	}
	unlock := m.locks.Lock(execID)
	defer unlock()
	return m.teardown(ctx, execID, "")
}

// teardown stops an execution's bridge and has the node-manager release the
// rest. runtime is the execution's runtime when the caller knows it; the
// runtime record, when there is one, says it too.
func (m *Manager) teardown(ctx context.Context, execID, runtime string) error {
	m.streams.revoke(execID, fmt.Errorf("execution %s stopped", execID))
	m.detachGateway(execID)
	physical := execID
	if rec, err := m.records.load(execID); err == nil {
		runtime, physical = rec.Runtime, rec.physicalID()
		if bc, err := m.bridge(rec); err == nil {
			bc.stop(ctx)
		}
		killIfSame(rec.BridgePid, rec.BridgeStartTime)
	}
	m.mu.Lock()
	if bc := m.bridges[execID]; bc != nil {
		bc.close()
		delete(m.bridges, execID)
	}
	m.mu.Unlock()
	if err := m.cfg.Privileged.Cleanup(ctx, physical, runtime); err != nil {
		return fmt.Errorf("exec %s: cleanup: %w", execID, err)
	}
	return m.records.remove(execID)
}

// FinishInterruptedStarts completes the starts an earlier run of the node
// did not finish (Record.Starting): the runtime started the execution and
// its bridge runs, but the guest may not have the sandbox's identity, so the
// bridge would refuse every request. Nothing of the caller's ran there (a
// start answers only once it is done), so the node does what was left:
// the bridge's admission, then the identity (Init is safe to repeat on a
// guest that got it already). One that cannot be finished is left for the
// control plane, which sees it fail. Called once at start, before the node
// serves.
func (m *Manager) FinishInterruptedStarts(ctx context.Context) {
	recs, _ := m.records.all()
	for _, rec := range recs {
		if !rec.Starting {
			continue
		}
		m.log.Warn("finishing an execution's start that the node's last run did not finish", "exec", rec.ExecID, "sandbox", rec.SandboxID)
		if err := m.finishStart(ctx, rec); err != nil {
			m.log.Error("finish an interrupted start", "exec", rec.ExecID, "err", err)
		}
	}
}

func (m *Manager) finishStart(ctx context.Context, rec *Record) error {
	bc, err := m.bridge(rec)
	if err != nil {
		return err
	}
	if err := bc.waitReady(ctx, m.cfg.BridgeReadyTimeout); err != nil {
		return err
	}
	if err := m.pushAdmission(ctx, bc); err != nil {
		return err
	}
	// Nobody waits for this start's answer: what Init said is logged.
	if _, err := m.installIdentity(ctx, bc, rec.StartExecution); err != nil {
		return err
	}
	rec.Starting = false
	return m.records.save(rec)
}

// killIfSame kills pid only if it is still the process that started at start.
func killIfSame(pid int, start uint64) {
	if pid <= 0 {
		return
	}
	if st, err := driver.ProcStartTime(pid); err == nil && st == start {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// List reports every execution on the node as observed now.
func (m *Manager) List(ctx context.Context) []nodev1.Execution {
	return m.list(ctx, "")
}

// ListSandbox reports the executions of sandbox sandboxID on the node as
// observed now. Only those are observed: a delete or a rollback that looks
// for the executions it replaces asks no other execution's bridge.
func (m *Manager) ListSandbox(ctx context.Context, sandboxID string) []nodev1.Execution {
	if sandboxID == "" {
		return nil
	}
	return m.list(ctx, sandboxID)
}

// report lists every execution on the node for the heartbeat: an
// execution whose bridge answered within Manager.statusRefresh that it runs,
// and whose bridge process still lives, is reported running without a new
// round trip (observeHeld). The rest of each entry is read from the
// runtime records as List does, so a removed execution leaves the report
// and a paused or fenced one is reported as such at once.
func (m *Manager) report(ctx context.Context) []nodev1.Execution {
	return m.listHeld(ctx, "", m.statusRefresh)
}

// list observes the executions of sandboxID (empty: every sandbox).
func (m *Manager) list(ctx context.Context, sandboxID string) []nodev1.Execution {
	return m.listHeld(ctx, sandboxID, 0)
}

// listHeld lists the executions of sandboxID (empty: every sandbox),
// observed as observeHeld does with maxAge.
func (m *Manager) listHeld(ctx context.Context, sandboxID string, maxAge time.Duration) []nodev1.Execution {
	recs, errs := m.records.all()
	for _, err := range errs {
		m.log.Warn("unreadable runtime record", "err", err)
	}
	out := make([]nodev1.Execution, 0, len(recs))
	for _, rec := range recs {
		if rec.Pool {
			continue // serves no sandbox: the pool reports it (PoolStatus)
		}
		if sandboxID != "" && rec.SandboxID != sandboxID {
			continue
		}
		out = append(out, m.withActivity(ctx, rec, m.observeHeld(ctx, rec, maxAge)))
	}
	return out
}

// Stats measures what an execution uses now.
func (m *Manager) Stats(ctx context.Context, execID string) (*nodev1.ExecStats, error) {
	if err := validSandboxExecID(execID); err != nil {
		return nil, err
	}
	rec, err := m.records.load(execID)
	if err != nil {
		return nil, fmt.Errorf("%w: exec %s is not on this node", errdefs.ErrNotFound, execID)
	}
	st, err := m.cfg.Privileged.Stats(ctx, rec.physicalID())
	if err != nil {
		return nil, fmt.Errorf("exec %s: stats: %w", execID, err)
	}
	return &nodev1.ExecStats{
		Time: time.Now().UTC(), CPUNanos: st.CPUNanos, CPUs: rec.CPUs,
		MemoryBytes: st.MemoryBytes, MemoryLimitBytes: uint64(rec.MemoryMiB) << 20, Pids: st.Pids,
		MemoryCacheBytes: st.MemoryCacheBytes, DiskBytes: st.DiskBytes, DiskLimitBytes: st.DiskLimitBytes,
	}, nil
}

// Get reports one execution.
func (m *Manager) Get(ctx context.Context, execID string) (*nodev1.Execution, error) {
	if err := validSandboxExecID(execID); err != nil {
		return nil, err
	}
	rec, err := m.records.load(execID)
	if err != nil {
		return nil, fmt.Errorf("%w: exec %s is not on this node", errdefs.ErrNotFound, execID)
	}
	ex := m.observe(ctx, rec)
	return &ex, nil
}

func (m *Manager) setStarting(execID string, on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastStart = time.Now()
	if on {
		m.starting[execID] = true
	} else {
		delete(m.starting, execID)
	}
}

// observe asks the execution's bridge how it is.
func (m *Manager) observe(ctx context.Context, rec *Record) nodev1.Execution {
	return m.observeHeld(ctx, rec, 0)
}

// observeHeld observes the execution as observe does, but with maxAge > 0
// takes the bridge's held answer that the execution runs
// (bridgeConn.heldRunning) for a new one while it stands.
func (m *Manager) observeHeld(ctx context.Context, rec *Record, maxAge time.Duration) nodev1.Execution {
	ex := nodev1.Execution{
		ExecID: rec.ExecID, SandboxID: rec.SandboxID, Generation: rec.Generation,
		ActivationID: rec.ActivationID, Runtime: rec.Runtime, Template: rec.Template,
		StartedAt: rec.StartedAt, State: nodev1.ExecRunning, Warm: rec.Warm, Fenced: rec.Fenced,
	}
	m.mu.Lock()
	starting := m.starting[rec.ExecID]
	m.mu.Unlock()
	if starting {
		ex.State = nodev1.ExecStarting
		return ex
	}
	bc, err := m.bridge(rec)
	if err == nil {
		asked := time.Now()
		if maxAge > 0 && bc.heldRunning(asked, maxAge) {
			m.reported.Inc(reportHeld)
			return ex
		}
		if maxAge > 0 {
			m.reported.Inc(reportAsked)
		}
		var st bridge.Status
		st, err = bc.status(ctx)
		if err == nil && st.Reason != "" {
			err = errors.New(st.Reason)
		}
		if err == nil && st.Ready {
			bc.holdRunning(asked)
		}
	}
	if err != nil {
		ex.State = nodev1.ExecFailed
		ex.Reason = m.failureReason(rec, err)
	}
	return ex
}

// withActivity adds when the guest last served a request (for the control
// plane's idle handling); it costs a guest round trip, so only the
// heartbeat's report asks for it, not the create path, and only for a
// sandbox with an idle timeout (StartExecution.NoActivity unset).
func (m *Manager) withActivity(ctx context.Context, rec *Record, ex nodev1.Execution) nodev1.Execution {
	if ex.State != nodev1.ExecRunning || rec.Paused || rec.NoActivity {
		return ex
	}
	if bc, err := m.bridge(rec); err == nil {
		if act, err := bc.activity(ctx); err == nil {
			ex.LastActivity = act.LastActivity
		}
	}
	return ex
}

// failureReason prefers what the bridge wrote when it stopped.
func (m *Manager) failureReason(rec *Record, err error) string {
	if b, rerr := os.ReadFile(m.records.exitFile(rec.ExecID)); rerr == nil && len(b) > 0 {
		return "host bridge stopped: " + string(trimNL(b))
	}
	return "host bridge unreachable: " + err.Error()
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	if len(b) > 512 {
		b = b[:512]
	}
	return b
}

// bridge returns the verified connection to rec's host bridge.
func (m *Manager) bridge(rec *Record) (*bridgeConn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if bc := m.bridges[rec.ExecID]; bc != nil {
		return bc, nil
	}
	bc := m.connectBridge(rec)
	m.bridges[rec.ExecID] = bc
	return bc, nil
}
