package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/bridge"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/metrics"
)

// Clock agreement (catalogue E-12). A receiver judges a capability's window
// by its own wall clock, so a node whose clock runs an hour behind would
// accept a fresh capability for an hour and more, and one that runs ahead
// would refuse them all as expired. The node therefore measures its clock
// against the control plane's with every heartbeat and refuses every
// capability while the two differ by more than capability.Skew.
//
// The measure: the heartbeat answer carries the control plane's time T when
// it wrote the answer. The node notes its wall clock when it sent the
// heartbeat (s) and when the answer arrived (r = s + rtt, rtt measured on the
// monotonic clock). T was taken somewhere in [s, r] of node time, so the
// offset is T - (s + rtt/2) with an error of at most rtt/2. The node agrees
// when |offset| + rtt/2 <= Skew: the bound is counted against it, so a slow
// answer cannot make a bad clock look good. An answer that took longer
// than maxClockRTT says nothing either way and is not used.
//
// Between heartbeats the node watches its wall clock against its monotonic
// clock (Go's time.Time carries both): a wall clock set forward or back by d
// since the measure moves the estimated offset by d at once, without waiting
// for the next heartbeat.
//
// Before the first answer after a start, the node has measured nothing and
// refuses every capability (fail closed). That lasts one heartbeat round
// trip when the control plane is reachable (the first heartbeat is sent as
// the node starts; a request that arrives meanwhile waits for it, up to
// firstMeasureWait), and as long as it is unreachable otherwise. An answer
// without the control plane's time (an older control plane) counts as no
// measure.

// firstMeasureWait is how long a capability check waits for the first
// measure once the heartbeat loop runs: a request that reaches a node just
// restarted (its API serves before its first heartbeat is answered) waits
// for that answer instead of failing at once. It is refused if none comes.
const firstMeasureWait = 3 * time.Second

// maxClockRTT bounds the round trip of a heartbeat whose answer is used to
// measure the clock: past it, rtt/2 alone would be most of the skew.
const maxClockRTT = 5 * time.Second

// errClock marks a refusal because the node's clock is not known to agree
// with the control plane's: errdefs.ErrClockSkew, answered 503
// clock_disagrees (internal/apierr).
var errClock = fmt.Errorf("%w: node clock does not agree with the control plane's", errdefs.ErrClockSkew)

// clockReading is one reading of this node's clocks.
type clockReading struct {
	// wall is the wall clock (with no monotonic part).
	wall time.Time
	// mono is the monotonic clock: time since the process's origin.
	mono time.Duration
}

// clockAgreement is the node's latest measure of its clock.
type clockAgreement struct {
	mu sync.Mutex // guards every field below
	// measured is set by the first usable heartbeat answer.
	measured bool
	// offset is the control plane's time minus this node's at the
	// measure, bound the measure's error (rtt/2).
	offset, bound time.Duration
	// at is this node's clocks at the measure.
	at clockReading
	// agreed is the last verdict logged and exposed; it changes on a
	// measure, or when a check finds the wall clock jumped.
	agreed bool
	// logged is set once a verdict was logged (the first is always).
	logged bool
	// heartbeating is set when the heartbeat loop starts; first is
	// closed by the first measure.
	heartbeating bool
	first        chan struct{}
}

// firstMeasure returns the channel the first measure closes.
func (c *clockAgreement) firstMeasure() chan struct{} {
	if c.first == nil {
		c.first = make(chan struct{})
	}
	return c.first
}

// waitFirst waits up to d for the first measure if the heartbeat loop runs
// and none was taken yet.
func (c *clockAgreement) waitFirst(d time.Duration) {
	c.mu.Lock()
	if c.measured || !c.heartbeating {
		c.mu.Unlock()
		return
	}
	first := c.firstMeasure()
	c.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-first:
	case <-t.C:
	}
}

// startHeartbeats marks the heartbeat loop as running.
func (c *clockAgreement) startHeartbeats() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.heartbeating = true
}

// clockVerdict is the state of the node's clock at one moment.
type clockVerdict struct {
	measured bool
	agreed   bool
	// offset is the estimated offset now: control plane minus node.
	offset, bound time.Duration
}

// err is the refusal for a verdict that does not agree, nil otherwise.
func (v clockVerdict) err() error {
	switch {
	case v.agreed:
		return nil
	case !v.measured:
		return fmt.Errorf("%w: the node has not yet measured its clock against the control plane's (no heartbeat answered since it started); capabilities refused until it has", errClock)
	}
	return fmt.Errorf("%w: node clock differs from the control plane's by %s (±%s); capabilities refused until it agrees (within %s): fix the node's time synchronisation (NTP)",
		errClock, roundOffset(v.offset), v.bound.Round(time.Millisecond), capability.Skew)
}

// roundOffset formats an offset as seconds with the node's sign: positive
// when the node is ahead of the control plane.
func roundOffset(offset time.Duration) string {
	ahead := -offset
	return fmt.Sprintf("%+.1fs", ahead.Seconds())
}

// observe records a measure: the node's clocks read when the heartbeat was
// sent and when its answer arrived, and the control plane's time in the
// answer. It reports whether the measure was used.
func (c *clockAgreement) observe(sent, received clockReading, server time.Time) bool {
	rtt := received.mono - sent.mono
	if rtt < 0 || rtt > maxClockRTT || server.IsZero() {
		return false
	}
	mid := sent.wall.Add(rtt / 2)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.measured {
		close(c.firstMeasure())
	}
	c.measured = true
	c.offset = server.Sub(mid)
	c.bound = rtt / 2
	c.at = received
	return true
}

// verdict judges the clock at the reading now.
func (c *clockAgreement) verdict(now clockReading) clockVerdict {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.measured {
		return clockVerdict{}
	}
	// Wall minus monotonic time elapsed since the measure: how far the
	// wall clock was set since (NTP slews it by at most 0.05%).
	drift := now.wall.Sub(c.at.wall) - (now.mono - c.at.mono)
	offset := c.offset - drift
	return clockVerdict{measured: true, offset: offset, bound: c.bound,
		agreed: abs(offset)+c.bound <= capability.Skew}
}

// changed records v as the verdict and reports whether it differs from the
// last one recorded (or none was).
func (c *clockAgreement) changed(v clockVerdict) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logged && c.agreed == v.agreed {
		return false
	}
	c.logged, c.agreed = true, v.agreed
	return true
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// clockVerdict judges the node's clock now and logs a change of verdict
// (once per change: a node out of agreement logs once, not per request).
func (m *Manager) clockVerdict() clockVerdict {
	v := m.clock.verdict(m.readClock())
	if m.clock.changed(v) {
		go m.pushClockToBridges()
		switch {
		case v.agreed:
			m.log.Info("node clock agrees with the control plane's: capabilities accepted",
				"offset", roundOffset(v.offset), "error_bound", v.bound)
		case v.measured:
			m.log.Error("node clock differs from the control plane's: capabilities refused until it agrees",
				"offset", roundOffset(v.offset), "error_bound", v.bound, "skew", capability.Skew)
		default:
			m.log.Warn("node clock not yet measured against the control plane's: capabilities refused until a heartbeat is answered")
		}
	}
	return v
}

// now is this node's wall clock (with its monotonic reading), moved by the
// test-only offset of SPACE_TEST_CLOCK_OFFSET_FILE.
func (m *Manager) now() time.Time {
	if m.clockSource != nil {
		return m.clockSource().wall
	}
	return time.Now().Add(m.testOffset.get())
}

// clockOrigin is the origin of clockReading.mono.
var clockOrigin = time.Now()

// readClock reads this node's clocks; the test-only offset moves the wall
// clock alone, as setting the system clock would.
func (m *Manager) readClock() clockReading {
	if m.clockSource != nil {
		return m.clockSource()
	}
	t := time.Now()
	return clockReading{wall: t.Round(0).Add(m.testOffset.get()), mono: t.Sub(clockOrigin)}
}

// testClockOffset is a test-only shift of the node's clock: the e2e tests
// cannot set the system clock of a shared machine. The environment variable
// SPACE_TEST_CLOCK_OFFSET_FILE names a file holding a Go duration ("-1h");
// the node re-reads it at most every 100 ms. Unset (every real deployment),
// the offset is 0 and nothing is read.
type testClockOffset struct {
	path string
	mu   sync.Mutex // guards offset and read
	// offset is the file's last value, read when it was read.
	offset time.Duration
	read   time.Time
}

// TestClockOffsetEnv names the test-only clock offset file (see
// testClockOffset). Never set it outside tests.
const TestClockOffsetEnv = "SPACE_TEST_CLOCK_OFFSET_FILE"

func (o *testClockOffset) get() time.Duration {
	if o.path == "" {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if time.Since(o.read) < 100*time.Millisecond {
		return o.offset
	}
	o.read = time.Now()
	b, err := os.ReadFile(o.path)
	if err != nil {
		o.offset = 0
		return 0
	}
	d, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		d = 0
	}
	o.offset = d
	return d
}

// logTestClockOffset warns that the test-only offset is in use.
func logTestClockOffset(log *slog.Logger, path string) {
	if path != "" {
		log.Warn("TEST ONLY: the node's clock is shifted by the offset in "+TestClockOffsetEnv, "file", path)
	}
}

// writeClockMetrics writes the clock's gauges in the Prometheus text format.
func (m *Manager) writeClockMetrics(w io.Writer) {
	v := m.clock.verdict(m.readClock())
	agreed := 0
	if v.agreed {
		agreed = 1
	}
	metrics.WriteGauge(w, "space_node_clock_offset_seconds", "This node's clock minus the control plane's, as last measured (and moved by any jump of the wall clock since); 0 before the first measure.", (-v.offset).Seconds())
	metrics.WriteGauge(w, "space_node_clock_offset_error_seconds", "The error bound of the offset measure (half the heartbeat's round trip).", v.bound.Seconds())
	metrics.WriteGauge(w, "space_node_clock_agreed", "1 while this node's clock agrees with the control plane's within the capability skew; 0 while it refuses every capability for it.", agreed)
}

// bridgeClock is the verdict a host bridge is told (bridge.ClockRequest).
func (v clockVerdict) bridgeClock() bridge.ClockRequest {
	r := bridge.ClockRequest{Agreed: v.agreed, OffsetMS: v.offset.Milliseconds(), BoundMS: v.bound.Milliseconds()}
	if err := v.err(); err != nil {
		r.Reason = err.Error()
	}
	return r
}

// pushClockToBridges tells every execution's host bridge the node's clock
// verdict: a bridge admits nothing while its node's clock disagrees.
func (m *Manager) pushClockToBridges() {
	// One push at a time, each reading the verdict as it sends: two
	// changes in quick succession cannot leave a bridge with the older.
	m.clockPushMu.Lock()
	defer m.clockPushMu.Unlock()
	recs, _ := m.records.all()
	for _, rec := range recs {
		bc, err := m.bridge(rec)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := bc.pushClock(ctx, m.clock.verdict(m.readClock()).bridgeClock()); err != nil {
			m.log.Warn("push the clock verdict to a host bridge", "exec", rec.ExecID, "err", err)
		}
		cancel()
	}
}

// pushAdmission hands a new bridge what it admits requests with: the keys
// (when the node has them) and the clock verdict.
func (m *Manager) pushAdmission(ctx context.Context, bc *bridgeConn) error {
	if keys := m.currentKeys(); keys != nil {
		if err := bc.pushKeys(ctx, keys); err != nil {
			return err
		}
	}
	return bc.pushClock(ctx, m.clock.verdict(m.readClock()).bridgeClock())
}
