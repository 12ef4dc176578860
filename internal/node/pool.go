package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/privop"
)

// The warm pool keeps executions prepared ahead of demand: the root volume
// cloned (or the VM restored from its template snapshot), the guest daemon
// up, its host bridge connected and holding the verification keys — but
// bound to no sandbox: no identity, no environment, no network policy, and
// nothing of any tenant. A create whose template, runtime and size match
// claims one (claimWarm) and only installs what is the sandbox's own, which
// is what makes a pool hit fast. A prepared execution is handed out once and
// never returns to the pool, so nothing one tenant did can reach another;
// its guest reseeds its RNG from the host's entropy at the claim (the
// bridge's Init), so VMs restored from one template snapshot do not share a
// random state.
//
// What to keep is the control plane's decision (PoolTarget, pushed with
// every heartbeat answer); the node fills within its capacity, one
// execution at a time and never while a create is being started, so that
// preparing for later does not slow down the creates of now.

// poolIDPrefix starts the ids of prepared executions.
const poolIDPrefix = "pool-"

// poolFillBackoff bounds how long a key whose preparation failed waits
// before it is tried again. poolQuiet is how long after a create the node
// must be quiet before it prepares again, unless a pool is below a quarter
// of its target: a burst of creates claims from the pool without a
// preparation competing for the CPUs.
const (
	poolQuiet          = 250 * time.Millisecond
	poolFillBackoffMin = 2 * time.Second
	poolFillBackoffMax = time.Minute
)

// pooled is one prepared execution.
type pooled struct {
	rec  *Record
	link *driver.Link
	// memory is what it held when last measured, at measured (the pool
	// status measures each at most every poolMeasureEvery).
	memory   uint64
	measured time.Time
}

// poolPrepareTimeout bounds one preparation.
const poolPrepareTimeout = 2 * time.Minute

// poolMeasureEvery bounds how often a ready execution's memory is measured
// (a node-manager round trip): an idle prepared execution changes little.
const poolMeasureEvery = 30 * time.Second

// warmPool is the node's set of prepared executions and what it should
// hold.
type warmPool struct {
	mu sync.Mutex // guards everything below
	// targets is nil until the control plane first says what it wants.
	targets map[nodev1.PoolKey]nodev1.PoolTarget
	ready   map[nodev1.PoolKey][]*pooled
	filling map[nodev1.PoolKey]int
	hits    map[nodev1.PoolKey]uint64
	misses  map[nodev1.PoolKey]uint64
	// retryAt and backoff hold off keys whose last preparation failed.
	retryAt map[nodev1.PoolKey]time.Time
	backoff map[nodev1.PoolKey]time.Duration
	// wake prods the filler: targets changed, or an entry was claimed.
	wake chan struct{}
	// draining counts the background drains, which RunPool waits for
	// before it returns.
	draining sync.WaitGroup
}

func (p *warmPool) init() {
	p.ready = map[nodev1.PoolKey][]*pooled{}
	p.filling = map[nodev1.PoolKey]int{}
	p.hits = map[nodev1.PoolKey]uint64{}
	p.misses = map[nodev1.PoolKey]uint64{}
	p.retryAt = map[nodev1.PoolKey]time.Time{}
	p.backoff = map[nodev1.PoolKey]time.Duration{}
	p.wake = make(chan struct{}, 1)
}

func (p *warmPool) prod() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take removes and returns a ready execution of key, or nil; it counts the
// hit or the miss.
func (p *warmPool) take(key nodev1.PoolKey) *pooled {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.ready[key]
	if len(list) == 0 {
		p.misses[key]++
		return nil
	}
	// Oldest first: every entry ages the same way.
	e := list[0]
	p.ready[key] = list[1:]
	p.hits[key]++
	p.prod()
	return e
}

// SetPoolTargets replaces what the node should keep prepared. Prepared
// executions no target wants any more (or of another template version) are
// drained in the background.
func (m *Manager) SetPoolTargets(targets []nodev1.PoolTarget) {
	want := make(map[nodev1.PoolKey]nodev1.PoolTarget, len(targets))
	for _, t := range targets {
		if t.Size <= 0 || privop.ValidTemplateName(t.Template) != nil || t.Runtime == "" {
			continue
		}
		want[t.PoolKey] = t
	}
	p := &m.pool
	p.mu.Lock()
	var drain []*pooled
	for key, list := range p.ready {
		t, ok := want[key]
		keep := list[:0]
		for _, e := range list {
			if ok && e.rec.PoolVersion == t.Version && len(keep) < t.Size {
				keep = append(keep, e)
			} else {
				drain = append(drain, e)
			}
		}
		p.ready[key] = keep
	}
	p.targets = want
	p.mu.Unlock()
	p.prod()
	if len(drain) > 0 {
		p.draining.Add(1)
		go func() {
			defer p.draining.Done()
			m.drainPooled(drain, "no longer wanted (pool target or template changed)")
		}()
	}
}

// PoolStatus reports the pool per key: every key with a target, and every
// key creates asked for, with the memory its ready executions hold now.
func (m *Manager) PoolStatus(ctx context.Context) []nodev1.PoolStatus {
	p := &m.pool
	p.mu.Lock()
	keys := map[nodev1.PoolKey]bool{}
	for _, set := range []map[nodev1.PoolKey]uint64{p.hits, p.misses} {
		for k := range set {
			keys[k] = true
		}
	}
	for k := range p.targets {
		keys[k] = true
	}
	for k := range p.ready {
		keys[k] = true
	}
	out := make([]nodev1.PoolStatus, 0, len(keys))
	var ready [][]*pooled
	for k := range keys {
		out = append(out, nodev1.PoolStatus{PoolKey: k, Ready: len(p.ready[k]), Filling: p.filling[k], Hits: p.hits[k], Misses: p.misses[k]})
		ready = append(ready, slices.Clone(p.ready[k]))
	}
	p.mu.Unlock()
	// Measured outside the lock (each is a node-manager round trip), and
	// only when the last measure is old.
	now := time.Now()
	for i, list := range ready {
		for _, e := range list {
			p.mu.Lock()
			mem, stale := e.memory, now.Sub(e.measured) >= poolMeasureEvery
			p.mu.Unlock()
			if stale {
				if st, err := m.cfg.Privileged.Stats(ctx, e.rec.physicalID()); err == nil {
					mem = st.MemoryBytes
					p.mu.Lock()
					e.memory, e.measured = mem, now
					p.mu.Unlock()
				}
			}
			out[i].MemoryBytes += mem
		}
	}
	sort.Slice(out, func(i, j int) bool { return poolKeyLess(out[i].PoolKey, out[j].PoolKey) })
	return out
}

func poolKeyLess(a, b nodev1.PoolKey) bool {
	if a.Template != b.Template {
		return a.Template < b.Template
	}
	if a.Runtime != b.Runtime {
		return a.Runtime < b.Runtime
	}
	if a.CPUs != b.CPUs {
		return a.CPUs < b.CPUs
	}
	return a.MemoryMiB < b.MemoryMiB
}

// RunPool keeps the warm pool filled until ctx is done. It first removes
// what a previous incarnation of the node prepared: those executions'
// network links died with it, and preparing anew is cheaper than adopting.
func (m *Manager) RunPool(ctx context.Context) {
	m.recoverPool(ctx)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		for ctx.Err() == nil {
			key, t, ok := m.nextToFill()
			if !ok {
				break
			}
			// A preparation is not cut short by the node stopping: an
			// interrupted one could leave a VM the drain below does not
			// know of. It is bounded instead, and drained with the rest.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), poolPrepareTimeout)
			m.fillOne(fctx, key, t.Version)
			cancel()
		}
		select {
		case <-ctx.Done():
			m.drainAll()
			return
		case <-m.pool.wake:
		case <-tick.C:
		}
	}
}

// nextToFill picks the key most short of its target that may be filled
// now, and counts it as filling; ok is false when nothing should be.
func (m *Manager) nextToFill() (key nodev1.PoolKey, target nodev1.PoolTarget, ok bool) {
	// Creates first: a fill competes with them for the same CPUs.
	m.mu.Lock()
	busy := len(m.starting) > 0
	quiet := time.Since(m.lastStart) >= poolQuiet
	m.mu.Unlock()
	if busy {
		return key, target, false
	}
	p := &m.pool
	// The node's free memory costs a read of every runtime record: only
	// when some pool is short of its target (the common idle case, with
	// full pools or none, reads nothing).
	p.mu.Lock()
	anyShort := false
	for k, t := range p.targets {
		if len(p.ready[k])+p.filling[k] < t.Size {
			anyShort = true
			break
		}
	}
	p.mu.Unlock()
	if !anyShort {
		return key, target, false
	}
	free := m.freeMemoryMiB()
	p.mu.Lock()
	defer p.mu.Unlock()
	best := -1
	now := time.Now()
	for k, t := range p.targets {
		have := len(p.ready[k]) + p.filling[k]
		short := t.Size - have
		low := have*4 < t.Size
		if short <= 0 || now.Before(p.retryAt[k]) || k.MemoryMiB > free || !quiet && !low {
			continue
		}
		if short > best || short == best && poolKeyLess(k, key) {
			best, key, target = short, k, t
		}
	}
	if best <= 0 {
		return key, target, false
	}
	p.filling[key]++
	return key, target, true
}

// freeMemoryMiB is the node's memory capacity less what its executions
// (sandboxes' and prepared ones) may use. A node without a declared
// capacity has no bound.
func (m *Manager) freeMemoryMiB() int {
	if m.cfg.MemoryMiB <= 0 {
		return int(^uint(0) >> 1)
	}
	used := 0
	recs, _ := m.records.all()
	for _, rec := range recs {
		used += rec.MemoryMiB
	}
	return m.cfg.MemoryMiB - used
}

// fillOne prepares one execution of key (counted as filling by
// nextToFill).
func (m *Manager) fillOne(ctx context.Context, key nodev1.PoolKey, version string) {
	p := &m.pool
	e, err := m.prepare(ctx, key, version)
	p.mu.Lock()
	p.filling[key]--
	if err != nil {
		b := min(max(p.backoff[key]*2, poolFillBackoffMin), poolFillBackoffMax)
		p.backoff[key], p.retryAt[key] = b, time.Now().Add(b)
		p.mu.Unlock()
		if ctx.Err() == nil {
			m.log.Warn("warm pool: preparing an execution failed", "template", key.Template, "runtime", key.Runtime, "retry_in", b, "err", err)
		}
		return
	}
	delete(p.backoff, key)
	delete(p.retryAt, key)
	t, wanted := p.targets[key]
	if wanted && t.Version == version && len(p.ready[key]) < t.Size {
		p.ready[key] = append(p.ready[key], e)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	// The target changed while it was prepared.
	m.drainPooled([]*pooled{e}, "no longer wanted")
}

// prepare starts one execution of key that serves nobody yet.
func (m *Manager) prepare(ctx context.Context, key nodev1.PoolKey, version string) (*pooled, error) {
	id := poolIDPrefix + randomSuffix()
	unlock := m.locks.Lock(id)
	defer unlock()
	if err := os.MkdirAll(m.records.execDir(id), 0o700); err != nil {
		return nil, fmt.Errorf("prepared execution %s: state dir: %w", id, err)
	}
	t0 := time.Now()
	// The execution is its own sandbox until claimed: the runtime needs a
	// sandbox id (the ns runtime's uid range is per sandbox) and a host
	// name, and neither may be a tenant's.
	started, channel, link, err := m.cfg.Privileged.Start(ctx, privop.StartArgs{
		ExecID: id, SandboxID: id, Template: key.Template, Runtime: key.Runtime, Hostname: "sandbox",
		CPUs: key.CPUs, MemoryMiB: key.MemoryMiB, PidsMax: pidsFor(key.MemoryMiB),
		Network: m.cfg.Gateway != nil,
	})
	if err != nil {
		// The node-manager may have made part of it before failing.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := m.cfg.Privileged.Cleanup(cctx, id, key.Runtime); cerr != nil {
			m.log.Warn("warm pool: removing a failed preparation", "exec", id, "err", cerr)
		}
		_ = m.records.remove(id)
		return nil, err
	}
	defer channel.Close()
	l := link
	rec := &Record{
		StartExecution: nodev1.StartExecution{ExecID: id, SandboxID: id, Template: key.Template, Runtime: key.Runtime, CPUs: key.CPUs, MemoryMiB: key.MemoryMiB},
		SandboxPid:     started.Pid, SandboxStartTime: started.StartTime, StartedAt: time.Now().UTC(),
		Pool: true, PoolVersion: version,
	}
	fail := func(err error) (*pooled, error) {
		l.Close()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if terr := m.teardown(cctx, id, key.Runtime); terr != nil {
			m.log.Warn("warm pool: removing a failed preparation", "exec", id, "err", terr)
		}
		return nil, err
	}
	if err := m.spawnBridge(rec, channel); err != nil {
		return fail(err)
	}
	if err := m.records.save(rec); err != nil {
		return fail(err)
	}
	bc, err := m.bridge(rec)
	if err != nil {
		return fail(err)
	}
	if err := bc.waitReady(ctx, m.cfg.BridgeReadyTimeout); err != nil {
		return fail(fmt.Errorf("prepared execution %s: %w%s", id, err, m.bridgeLogTail(id)))
	}
	if err := m.pushAdmission(ctx, bc); err != nil {
		return fail(fmt.Errorf("prepared execution %s: %w", id, err))
	}
	if m.cfg.Gateway != nil {
		// The claim's trust of the sandbox's CA then writes the guest's
		// bundle without reading it first (bridge/trust.go).
		if err := bc.post(ctx, "/bridge/v1/trust/prefetch"); err != nil {
			return fail(fmt.Errorf("prepared execution %s: %w", id, err))
		}
	}
	m.log.Debug("warm pool: execution prepared", "exec", id, "template", key.Template, "runtime", key.Runtime, "took", time.Since(t0))
	return &pooled{rec: rec, link: l}, nil
}

// claimWarm hands a prepared execution matching req to req's sandbox, or
// returns false when there is none (or the claim failed and was undone: the
// caller then starts one cold).
func (m *Manager) claimWarm(ctx context.Context, req nodev1.StartExecution) (*Record, bool) {
	if req.Snapshot != "" || req.DiskMiB != 0 && req.DiskMiB != privop.DefaultDiskMiB {
		// Prepared executions have the default disk limit.
		return nil, false
	}
	key := nodev1.PoolKey{Template: req.Template, Runtime: req.Runtime, CPUs: req.CPUs, MemoryMiB: req.MemoryMiB}
	e := m.pool.take(key)
	if e == nil {
		return nil, false
	}
	rec, err := m.claim(ctx, req, e)
	if err != nil {
		m.log.Warn("warm pool: claim failed; starting cold", "exec", req.ExecID, "prepared", e.rec.ExecID, "err", err)
		return nil, false
	}
	return rec, true
}

// claim turns prepared execution e into req's: the runtime record moves to
// req's id (the bridge runs in that directory and follows it), the gateway
// attaches with req's policy, and the guest gets req's identity and
// environment. On failure everything of e is removed.
func (m *Manager) claim(ctx context.Context, req nodev1.StartExecution, e *pooled) (_ *Record, err error) {
	poolID := e.rec.ExecID
	unlock := m.locks.Lock(poolID)
	defer unlock()
	t0 := time.Now()
	rec := *e.rec
	rec.StartExecution = req
	rec.Physical = poolID
	rec.Pool, rec.PoolVersion, rec.Warm = false, "", true
	rec.StartedAt = time.Now().UTC()
	moved := false
	defer func() {
		if err == nil {
			return
		}
		e.link.Close()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		id := poolID
		if moved {
			id = req.ExecID
		}
		if terr := m.teardown(cctx, id, req.Runtime); terr != nil {
			m.log.Warn("warm pool: removing a failed claim", "exec", id, "err", terr)
		}
	}()
	// The record names its new id before the directory takes it: a crash
	// in between leaves a directory recoverPool completes.
	if err := m.records.saveIn(poolID, &rec); err != nil {
		return nil, err
	}
	if err := os.Rename(m.records.execDir(poolID), m.records.execDir(req.ExecID)); err != nil {
		return nil, fmt.Errorf("exec %s: claim %s: %w", req.ExecID, poolID, err)
	}
	moved = true
	tMoved := time.Now()
	// The connection to the bridge moves along: its open connections
	// (verified when they were made) stay good.
	m.mu.Lock()
	if bc := m.bridges[poolID]; bc != nil {
		bc.moveTo(req.ExecID, m.records.socket(req.ExecID))
		m.bridges[req.ExecID] = bc
		delete(m.bridges, poolID)
	}
	m.mu.Unlock()
	if err := m.attachGateway(&rec, e.link); err != nil {
		return nil, err
	}
	e.link = nil // the gateway owns it now
	tAttached := time.Now()
	bc, err := m.bridge(&rec)
	if err != nil {
		return nil, err
	}
	note, err := m.installIdentity(ctx, bc, req)
	if err != nil {
		return nil, err
	}
	rec.startNotReady = note
	m.log.Debug("warm pool: execution claimed", "exec", req.ExecID, "prepared", poolID,
		"move", tMoved.Sub(t0), "gateway", tAttached.Sub(tMoved), "identity", time.Since(tAttached))
	return &rec, nil
}

// recoverPool removes the prepared executions a previous incarnation left,
// and completes a claim it was interrupted in.
func (m *Manager) recoverPool(ctx context.Context) {
	entries, err := os.ReadDir(m.records.dir)
	if err != nil {
		return
	}
	for _, d := range entries {
		name := d.Name()
		if !d.IsDir() || privop.ValidExecID(name) != nil {
			continue
		}
		rec, err := m.records.loadAny(name)
		if err != nil {
			continue
		}
		switch {
		case rec.Pool:
			m.drainPooled([]*pooled{{rec: rec}}, "left by a previous run of the node")
		case rec.ExecID != name && rec.Physical == name:
			if _, err := os.Stat(m.records.execDir(rec.ExecID)); errors.Is(err, os.ErrNotExist) {
				if err := os.Rename(m.records.execDir(name), m.records.execDir(rec.ExecID)); err == nil {
					m.log.Info("warm pool: completed an interrupted claim", "exec", rec.ExecID, "prepared", name)
					continue
				}
			}
			m.log.Warn("warm pool: removing a claim that cannot be completed", "prepared", name, "exec", rec.ExecID)
			_ = m.cfg.Privileged.Cleanup(ctx, name, rec.Runtime)
			_ = m.records.remove(name)
		}
	}
}

// drainPooled removes prepared executions.
func (m *Manager) drainPooled(list []*pooled, why string) {
	for _, e := range list {
		e.link.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		unlock := m.locks.Lock(e.rec.ExecID)
		err := m.teardown(ctx, e.rec.ExecID, e.rec.Runtime)
		unlock()
		cancel()
		if err != nil {
			m.log.Warn("warm pool: removing a prepared execution", "exec", e.rec.ExecID, "err", err)
			continue
		}
		m.log.Debug("warm pool: prepared execution removed", "exec", e.rec.ExecID, "why", why)
	}
}

// drainAll empties the pool (the node is stopping: prepared executions hold
// memory and serve nobody).
func (m *Manager) drainAll() {
	p := &m.pool
	p.mu.Lock()
	var all []*pooled
	for k, list := range p.ready {
		all = append(all, list...)
		delete(p.ready, k)
	}
	p.targets = nil
	p.mu.Unlock()
	m.drainPooled(all, "node stopping")
	p.draining.Wait()
}

// randomSuffix is 16 random characters of [a-z2-7].
func randomSuffix() string { return strings.ToLower(rand.Text())[:16] }

// validSandboxExecID checks an execution id a caller names: a prepared
// execution of the pool is not addressable until a sandbox claims it, and
// then only by the sandbox's execution id.
func validSandboxExecID(id string) error {
	if err := privop.ValidExecID(id); err != nil {
		return err
	}
	if strings.HasPrefix(id, poolIDPrefix) {
		return fmt.Errorf("%w: exec id %q: ids starting with %q belong to the warm pool", errdefs.ErrInvalidArgument, id, poolIDPrefix)
	}
	return nil
}
