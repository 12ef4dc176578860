package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// A node cut off from the control plane must not go on running sandboxes
// that the control plane is about to bring back elsewhere: when it declares
// the node lost (no heartbeat for --node-lost-after), it restarts their
// snapshots on other nodes, and the old executions, still running behind a
// partition, would be second copies of the same sandboxes, writing to the
// same external services with the same credentials.
//
// So the node fences itself first. Every heartbeat answer renews a lease
// of FenceAfter (which the control plane sets well inside its own
// node-lost timeout); the lease runs from when that heartbeat was sent, on
// this machine's monotonic clock, so it ends before the control plane's
// count (which starts when the heartbeat arrived) can. When the lease ends,
// every running execution is frozen (the runtime's pause) and marked
// fenced, and the node refuses to start or thaw executions until a
// heartbeat is answered again.
//
// The node never thaws a fenced execution by itself: once heartbeats get
// through, it reports the executions as fenced, and the control plane,
// which alone knows whether a sandbox has been recovered elsewhere in the
// meantime, either retires the execution (a newer generation serves the
// sandbox) or resumes it, under the sandbox's reconcile lease.

// fenceCheckEvery paces the lease check; a fence lands at most this much
// after the lease ends.
const fenceCheckEvery = 100 * time.Millisecond

// fenceSweepEvery paces the sweeps of a node that is fenced already: they
// freeze what a start under way at the fence, or a failed freeze, left
// running, and each reads every runtime record.
const fenceSweepEvery = time.Second

// maxFenceAfter bounds the lease a heartbeat answer may ask for.
const maxFenceAfter = 24 * time.Hour

// fence is the node's heartbeat lease.
type fence struct {
	mu sync.Mutex // guards every field below
	// after is the lease's length; 0: the control plane asked for no
	// fencing (or never answered), and the lease never ends.
	after time.Duration
	// renewed is when the last answered heartbeat was sent (or when this
	// process started, for a lease carried over a restart).
	renewed time.Time
	// fenced is set once the lease ended, until the next renewal.
	fenced bool
}

// fenceState is what DATA/node/fence.json keeps across restarts: a node that
// restarts while cut off must fence itself just the same.
type fenceState struct {
	AfterMS int64 `json:"after_ms"`
}

func (m *Manager) fenceFile() string { return filepath.Join(m.cfg.DataDir, "node", "fence.json") }

// loadFence starts the lease at process start with the length the control
// plane last gave (none: no lease until it answers).
func (m *Manager) loadFence() {
	b, err := os.ReadFile(m.fenceFile())
	if err != nil {
		return
	}
	var st fenceState
	if err := json.Unmarshal(b, &st); err != nil || st.AfterMS < 0 {
		m.log.Warn("unreadable fence state: no fencing until the control plane answers", "file", m.fenceFile(), "err", err)
		return
	}
	m.fence.after = time.Duration(st.AfterMS) * time.Millisecond
	m.fence.renewed = time.Now()
}

// renewLease records an answered heartbeat sent at sent, whose answer asked
// for a lease of after (0: no fencing).
func (m *Manager) renewLease(sent time.Time, after time.Duration) {
	m.fence.mu.Lock()
	changed := after != m.fence.after
	if sent.After(m.fence.renewed) {
		m.fence.renewed = sent
	}
	m.fence.after = after
	m.fence.fenced = false
	m.fence.mu.Unlock()
	if changed {
		b, _ := json.Marshal(fenceState{AfterMS: after.Milliseconds()})
		if err := writeFileAtomic(m.fenceFile(), b); err != nil {
			m.log.Warn("save fence state", "err", err)
		}
	}
}

// leaseEnded reports whether the lease ran out at now.
func (m *Manager) leaseEnded(now time.Time) bool {
	m.fence.mu.Lock()
	defer m.fence.mu.Unlock()
	return m.fence.after > 0 && now.Sub(m.fence.renewed) > m.fence.after
}

// errFenced is why a fenced node refuses to start or thaw an execution.
func (m *Manager) errFenced() error {
	m.fence.mu.Lock()
	defer m.fence.mu.Unlock()
	return fmt.Errorf("%w: node %s is fenced: no heartbeat answered by the control plane for %s (lease %s); it starts and resumes nothing until one is",
		errdefs.ErrUnavailable, m.cfg.NodeID, time.Since(m.fence.renewed).Round(time.Millisecond), m.fence.after)
}

// heartbeatEvery is how often to report: the configured interval, but at
// least four times per lease, so one slow answer does not end it.
func (m *Manager) heartbeatEvery(every time.Duration) time.Duration {
	m.fence.mu.Lock()
	defer m.fence.mu.Unlock()
	if q := m.fence.after / 4; q > 0 && q < every {
		return q
	}
	return every
}

// RunFence freezes every running execution when the heartbeat lease ends,
// and keeps freezing what a start in flight at that moment left running,
// until ctx is done.
func (m *Manager) RunFence(ctx context.Context) {
	t := time.NewTicker(fenceCheckEvery)
	defer t.Stop()
	var swept time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !m.leaseEnded(time.Now()) {
			continue
		}
		m.fence.mu.Lock()
		first := !m.fence.fenced
		m.fence.fenced = true
		m.fence.mu.Unlock()
		if !first && time.Since(swept) < fenceSweepEvery {
			continue // fenced already: only stragglers are left to freeze
		}
		swept = time.Now()
		if n := m.fenceAll(ctx); n > 0 || first {
			m.log.Warn("heartbeat lease ended: executions frozen until the control plane answers", "frozen", n)
		}
	}
}

// fenceAll freezes the running executions that serve a sandbox and marks
// them fenced; it returns how many it froze. Each is frozen on its own
// goroutine: one whose lock a long operation holds (a VM's start or
// snapshot) must not hold up the others. A freeze that fails is retried at
// the next check.
func (m *Manager) fenceAll(ctx context.Context) int {
	recs, _ := m.records.all()
	var wg sync.WaitGroup
	var mu sync.Mutex // guards n
	n := 0
	for _, rec := range recs {
		if rec.Pool || rec.Paused || rec.Retired {
			// A prepared execution runs nobody's code; a paused one is
			// frozen already; a retired one is being stopped.
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := m.fenceOne(ctx, rec.ExecID)
			switch {
			case err == nil:
				mu.Lock()
				n++
				mu.Unlock()
			case errors.Is(err, errSkipFence):
			default:
				m.log.Warn("fence: freeze failed; retrying", "exec", rec.ExecID, "err", err)
			}
		}()
	}
	wg.Wait()
	if n > 0 {
		m.notifyChanged()
	}
	return n
}

var errSkipFence = errors.New("nothing to fence")

// fenceOne freezes one execution under its lock (after a start under way
// finished), unless a pause or a stop got there first.
func (m *Manager) fenceOne(ctx context.Context, execID string) error {
	unlock := m.locks.Lock(execID)
	defer unlock()
	rec, err := m.records.load(execID)
	if err != nil || rec.Pool || rec.Paused || rec.Retired {
		return errSkipFence
	}
	if err := m.pauser.Pause(ctx, rec.physicalID(), rec.Runtime); err != nil {
		return err
	}
	m.forgetStatus(execID)
	rec.Paused, rec.Fenced = true, true
	if err := m.records.save(rec); err != nil {
		return err
	}
	// Requests streaming from the execution end now rather than hang on a
	// frozen guest.
	m.streams.revoke(execID, fmt.Errorf("execution %s frozen: node %s is fenced", execID, m.cfg.NodeID))
	return nil
}

// writeFileAtomic writes b to path through a temporary file and a rename.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
