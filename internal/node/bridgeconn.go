package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/bridge"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/metrics"
	"github.com/spacesandbox/space/internal/unixsock"
)

// bridgeConn talks to one execution's host bridge. Every new connection is
// checked before a byte is sent (verifyPeer): the peer on the socket must be
// the bridge process this node started, by pid, start time and executable
// from the runtime record, so a process that took over the socket path, a
// reused pid or a bridge that exec'd something else is refused. Connections
// are never silently re-pointed: each one is a new dial that passes the same
// checks or fails.
type bridgeConn struct {
	mu sync.Mutex // guards execID and socket
	// execID names the execution in logs, socket is where new
	// connections dial: both change when a sandbox claims a prepared
	// execution (moveTo), and the open connections stay good.
	execID    string
	socket    string
	want      bridgeProcess
	log       *slog.Logger        // nil: refusals are counted, and reported only by the caller's error
	refused   *metrics.CounterVec // refused peers by failed check
	transport *http.Transport
	client    *http.Client

	heldMu sync.Mutex // guards heldAt and pidfd
	// heldAt is when the bridge last answered that its guest is ready and
	// nothing is wrong (zero: no such answer held): the heartbeat's report
	// takes it for a new answer while it is young and the bridge process
	// lives (heldRunning), so an idle execution costs no round trip.
	heldAt time.Time
	// pidfd is a pidfd of the bridge process, opened with the first held
	// answer (-1: none): it turns readable when the process exits, which
	// one poll tells without reading /proc.
	pidfd int
	// statusCalls counts the status round trips to the bridge.
	statusCalls atomic.Int64
}

// connectBridge returns the verified connection to rec's bridge; refused
// peers are counted and logged with both identities.
func (m *Manager) connectBridge(rec *Record) *bridgeConn {
	return dialBridge(rec, m.records.socket(rec.ExecID), m.log, m.refusals.bridgePeer)
}

// dialBridge returns the connection to rec's bridge at socket; refused
// peers are counted in refused by check, and logged unless log is nil.
func dialBridge(rec *Record, socket string, log *slog.Logger, refused *metrics.CounterVec) *bridgeConn {
	b := &bridgeConn{execID: rec.ExecID, socket: socket, want: bridgeProcessOf(rec), log: log, refused: refused, pidfd: -1}
	if b.want.exeIno == 0 && log != nil {
		// Logged once per connection pool, i.e. once per execution and
		// run of the node.
		log.Warn("runtime record predates the host bridge executable check: checking pid and start time only",
			"exec", rec.ExecID, "bridge_pid", rec.BridgePid)
	}
	b.transport = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			b.mu.Lock()
			socket := b.socket
			b.mu.Unlock()
			c, err := unixsock.Dial(ctx, socket)
			if err != nil {
				return nil, err
			}
			if err := b.verify(c.(*net.UnixConn)); err != nil {
				c.Close()
				return nil, err
			}
			bridge.SetSocketBuffers(c)
			return c, nil
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
	b.client = &http.Client{Transport: b.transport}
	return b
}

// moveTo renames the execution the connection serves and where it dials:
// a sandbox claimed the prepared execution, whose directory (and bridge
// socket) moved with the claim. Idle connections are kept.
func (b *bridgeConn) moveTo(execID, socket string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.execID, b.socket = execID, socket
}

func (b *bridgeConn) name() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.execID
}

// verify checks a new connection and counts and logs a refusal.
func (b *bridgeConn) verify(c *net.UnixConn) error {
	err := verifyPeer(c, b.want)
	var r *peerRefusedError
	if !errors.As(err, &r) {
		return err
	}
	r.execID = b.name()
	b.refused.Inc(r.check)
	if b.log != nil {
		b.log.Warn("host bridge connection refused", "exec", r.execID, "check", r.check,
			slog.Group("peer", "pid", r.got.pid, "uid", r.got.uid, "start_time", r.got.start, "exe", r.got.exe()),
			slog.Group("bridge", "pid", b.want.pid, "start_time", b.want.start, "exe", b.want.exe()),
			"err", r.cause)
	}
	return err
}

// bridgeProcess is the host bridge process this node started, as the runtime
// record keeps it.
type bridgeProcess struct {
	pid            int
	start          uint64
	exeDev, exeIno uint64 // zero: the record predates the check
}

func bridgeProcessOf(rec *Record) bridgeProcess {
	return bridgeProcess{pid: rec.BridgePid, start: rec.BridgeStartTime, exeDev: rec.BridgeExeDev, exeIno: rec.BridgeExeIno}
}

func (p bridgeProcess) exe() string {
	if p.exeIno == 0 {
		return "unrecorded"
	}
	return fmt.Sprintf("%d:%d", p.exeDev, p.exeIno)
}

// peerProcess is what the node learnt of the process on the other end of a
// bridge socket; the zero value of a field means it could not be read.
type peerProcess struct {
	pid            int
	uid            uint32
	start          uint64
	exeDev, exeIno uint64
}

func (p peerProcess) exe() string {
	if p.exeIno == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%d:%d", p.exeDev, p.exeIno)
}

// peerRefusedError is a connection to a bridge socket whose peer is not the
// bridge this node started. It is of class ErrPermissionDenied.
type peerRefusedError struct {
	execID string
	check  string // the comparison that failed (peerCheck*)
	want   bridgeProcess
	got    peerProcess
	cause  error
}

func (e *peerRefusedError) Error() string {
	return fmt.Sprintf("exec %s: host bridge socket refused (%s check): peer pid %d uid %d start time %d exe %s; the bridge this node started is pid %d start time %d exe %s: %v",
		e.execID, e.check, e.got.pid, e.got.uid, e.got.start, e.got.exe(), e.want.pid, e.want.start, e.want.exe(), e.cause)
}

func (e *peerRefusedError) Unwrap() []error { return []error{errdefs.ErrPermissionDenied, e.cause} }

// verifyPeer checks that the process serving c is want: SO_PEERCRED names the
// process that listens on the socket; it must run as this node's user, have
// want's pid, the process with that pid must have want's start time (so a
// reused pid is caught), and /proc/<pid>/exe must be the file want recorded
// (stat follows the magic link to the file the process runs even when the
// path was replaced, so an upgrade of the binary on disk does not lock out a
// running bridge, while a bridge that exec'd another file is refused).
func verifyPeer(c *net.UnixConn, want bridgeProcess) error {
	cred, err := bridge.PeerCred(c)
	if err != nil {
		return &peerRefusedError{check: peerCheckCred, want: want, cause: err}
	}
	got := describePeer(cred)
	refuse := func(check string, cause error) error {
		return &peerRefusedError{check: check, want: want, got: got, cause: cause}
	}
	if uid := uint32(os.Geteuid()); cred.Uid != uid {
		return refuse(peerCheckUID, fmt.Errorf("the peer runs as uid %d, not the node's uid %d", cred.Uid, uid))
	}
	if got.pid != want.pid {
		return refuse(peerCheckPid, errors.New("the socket is served by another process"))
	}
	if got.start != want.start {
		return refuse(peerCheckStart, errors.New("the bridge's pid names another process: the pid was reused"))
	}
	if want.exeIno == 0 {
		return nil
	}
	if got.exeDev != want.exeDev || got.exeIno != want.exeIno {
		return refuse(peerCheckExe, errors.New("the process runs another executable than the node started"))
	}
	return nil
}

// describePeer reads what /proc says of the peer SO_PEERCRED names (nothing
// for a peer outside this pid namespace, pid 0).
func describePeer(cred unix.Ucred) peerProcess {
	p := peerProcess{pid: int(cred.Pid), uid: cred.Uid}
	if p.pid <= 0 {
		return p
	}
	p.start, _ = driver.ProcStartTime(p.pid)
	p.exeDev, p.exeIno, _ = exeIdentity(p.pid)
	return p
}

// bridgeIdentity returns what identifies the bridge process pid, which
// this process started and has not reaped: its start time and the device
// and inode of the file it runs. A bridge that has already exited (it
// refused its guest channel at once, say) has no executable in /proc any
// more: it gets an inode no file has (exitedBridgeIno), so no process can
// ever pass as it, and its exit file and log say why it went, which the
// node's wait for it reports.
func bridgeIdentity(pid int) (start, dev, ino uint64, err error) {
	if start, err = driver.ProcStartTime(pid); err != nil {
		return 0, 0, 0, err
	}
	dev, ino, err = exeIdentity(pid)
	if err != nil && !driver.ProcAlive(pid, start) {
		return start, 0, exitedBridgeIno, nil
	}
	return start, dev, ino, err
}

// exitedBridgeIno is the executable inode recorded for a bridge that exited
// before the node could read it: no file has it.
const exitedBridgeIno = ^uint64(0)

// exeIdentity returns the device and inode of the file process pid runs.
func exeIdentity(pid int) (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/exe", &st); err != nil {
		return 0, 0, fmt.Errorf("executable of pid %d: %w", pid, err)
	}
	return st.Dev, st.Ino, nil
}

// close drops the idle connections and the held answer's pidfd.
func (b *bridgeConn) close() {
	b.transport.CloseIdleConnections()
	b.heldMu.Lock()
	defer b.heldMu.Unlock()
	if b.pidfd >= 0 {
		unix.Close(b.pidfd)
		b.pidfd = -1
	}
}

// holdRunning keeps that the bridge answered, at a status round trip begun
// at asked, that its execution runs.
func (b *bridgeConn) holdRunning(asked time.Time) {
	b.heldMu.Lock()
	defer b.heldMu.Unlock()
	if asked.After(b.heldAt) {
		b.heldAt = asked
	}
	if b.pidfd < 0 {
		b.pidfd = openBridgePidfd(b.want)
	}
}

// pidfdOpen is unix.PidfdOpen (tests take it away).
var pidfdOpen = unix.PidfdOpen

// openBridgePidfd returns a pidfd of bridge process p, or -1 when there is
// none (the kernel has no pidfd_open, or p is gone). It is checked after
// the open: a process that has p's pid and start time then is the one the
// pidfd names (a pid is not reused while its process lives).
func openBridgePidfd(p bridgeProcess) int {
	if p.pid <= 0 {
		return -1
	}
	fd, err := pidfdOpen(p.pid, 0)
	if err != nil {
		return -1
	}
	if !driver.ProcAlive(p.pid, p.start) {
		unix.Close(fd)
		return -1
	}
	return fd
}

// processAlive reports whether the bridge process lives: by its pidfd
// when there is one, else by pid and start time (not a zombie). The
// caller holds heldMu.
func (b *bridgeConn) processAlive() bool {
	if b.pidfd >= 0 {
		fds := []unix.PollFd{{Fd: int32(b.pidfd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 0); err == nil {
			return n == 0 || fds[0].Revents&unix.POLLIN == 0
		}
	}
	return driver.ProcAlive(b.want.pid, b.want.start)
}

// forget drops the held answer: the next report asks the bridge.
func (b *bridgeConn) forget() {
	b.heldMu.Lock()
	defer b.heldMu.Unlock()
	b.heldAt = time.Time{}
}

// heldRunning reports whether the held answer that the execution runs
// still stands at now: it is younger than maxAge (the safety net for a
// change the node is not told of, such as a hung bridge) and the bridge
// process it came from is still alive (processAlive). A bridge that exits,
// the way every failure of its execution ends (guest gone, directory
// removed, stop), fails the second test at once, whether or not this
// process started it.
func (b *bridgeConn) heldRunning(now time.Time, maxAge time.Duration) bool {
	b.heldMu.Lock()
	defer b.heldMu.Unlock()
	at := b.heldAt
	if at.IsZero() || now.Sub(at) >= maxAge || now.Before(at) {
		return false
	}
	return b.processAlive()
}

func (b *bridgeConn) status(ctx context.Context) (bridge.Status, error) {
	b.statusCalls.Add(1)
	var st bridge.Status
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://bridge/bridge/v1/status", nil)
	resp, err := b.client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("bridge status: HTTP %d", resp.StatusCode)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&st)
	return st, err
}

// waitReady polls the bridge until the guest answered, the bridge gave up, or
// timeout passes.
func (b *bridgeConn) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	// A local socket is cheap to ask; a fine poll keeps create latency low.
	delay := time.Millisecond
	var last error
	for time.Now().Before(deadline) {
		st, err := b.status(ctx)
		switch {
		case err == nil && st.Ready:
			return nil
		case err == nil && st.Reason != "":
			return fmt.Errorf("guest not ready: %s", st.Reason)
		case err != nil:
			last = err
			if !driver.ProcAlive(b.want.pid, b.want.start) {
				// A bridge that refused its guest channel, or
				// failed otherwise, is gone: no use waiting.
				return fmt.Errorf("host bridge pid %d exited before it served: %w", b.want.pid, err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 5*time.Millisecond)
	}
	if last != nil {
		return fmt.Errorf("guest not ready after %s: %w", timeout, last)
	}
	return fmt.Errorf("guest not ready after %s", timeout)
}

// init installs the identity and returns what the bridge said of the
// template's start command (bridge.InitResult; zero when nothing).
func (b *bridgeConn) init(ctx context.Context, req bridge.InitRequest) (bridge.InitResult, error) {
	var res bridge.InitResult
	body, _ := json.Marshal(req)
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://bridge/bridge/v1/init", bytes.NewReader(body))
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(hreq)
	if err != nil {
		return res, fmt.Errorf("install identity: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return res, nil
	case http.StatusOK:
		// The bridge bounds the note; the limit here bounds the body.
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&res); err != nil {
			return res, fmt.Errorf("install identity: bad answer: %w", err)
		}
		return res, nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return res, fmt.Errorf("install identity: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
}

func (b *bridgeConn) stop(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://bridge/bridge/v1/stop", nil)
	if resp, err := b.client.Do(req); err == nil {
		resp.Body.Close()
	}
}

// post calls one of the bridge's bodiless POST endpoints.
func (b *bridgeConn) post(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://bridge"+path, nil)
	resp, err := b.client.Do(req)
	if err != nil {
		return fmt.Errorf("host bridge %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("host bridge %s: HTTP %d: %s", path, resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

// activity asks the guest when it last served a request.
func (b *bridgeConn) activity(ctx context.Context) (bridge.Activity, error) {
	var act bridge.Activity
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://bridge/bridge/v1/activity", nil)
	resp, err := b.client.Do(req)
	if err != nil {
		return act, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return act, fmt.Errorf("bridge activity: HTTP %d", resp.StatusCode)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&act)
	return act, err
}

// pushKeys hands the bridge the key set it admits requests with.
func (b *bridgeConn) pushKeys(ctx context.Context, ks *capability.KeySet) error {
	body, err := json.Marshal(bridge.KeysRequest{Keys: ks})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://bridge/bridge/v1/keys", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return fmt.Errorf("push keys to the host bridge: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("push keys to the host bridge: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

// pushClock tells the bridge its node's clock verdict (clock.go).
func (b *bridgeConn) pushClock(ctx context.Context, v bridge.ClockRequest) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://bridge/bridge/v1/clock", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return fmt.Errorf("push the clock verdict to the host bridge: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("push the clock verdict to the host bridge: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

// metrics reads the bridge's counts: its refusals and its guest's
// protocol errors.
func (b *bridgeConn) metrics(ctx context.Context) (bridge.Metrics, error) {
	var out bridge.Metrics
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://bridge/bridge/v1/metrics", nil)
	resp, err := b.client.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("bridge metrics: HTTP %d", resp.StatusCode)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&out)
	return out, err
}

// dir is the execution directory the bridge runs in (where its socket is).
func (b *bridgeConn) dir() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return filepath.Dir(b.socket)
}
