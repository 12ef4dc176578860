package e2bapi

import (
	"context"
	"math"
	"sync"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// E2B's getMetrics({start, end}) returns a series of samples of the
// sandbox's life. SPACE keeps one per sandbox in memory (metricsHistory):
// every MetricsEvery the replica reads each running sandbox's use from its
// node — one Stats call each, the CPU use being the CPU time between two
// samples over the wall time — and adds a sample. A series holds at most
// MetricsKeep samples as an exponential histogram (compact): the newest
// MetricsKeep/16 samples are MetricsEvery apart, the as many before them
// twice that, then four times, and so on, two neighbours merging into one
// at the later one's time (its CPU use their average weighted by the time
// each covers, memory and disk the later one's). With the defaults that is
// 22 samples 5 s apart, 22 10 s apart, …: the last two minutes at 5 s, the
// last hour at 80 s or finer, 16 levels (about 90 days) before the
// oldest merge regardless; a series covers the sandbox's whole life in
// bounded memory (BenchmarkMetricsHistoryObserve: 36 KiB for the 210
// samples of a day, so about 60 KiB at the bound; about 1.3 µs of CPU a
// sample). Samples are taken
// only while a sandbox runs (a paused one keeps its series; a deleted
// one's is dropped) and from the node alone, never the guest: a sample
// does not wake a sandbox or count as its activity. So a vm sandbox's
// history reports the memory its VM holds on the host (the live sample at
// a request reads the guest's own /proc/meminfo). Each replica of the
// control plane samples every sandbox itself; the series are kept in
// the store too, so a restart or another replica goes on from them
// (historystore.go).

// MetricsEvery is the spacing of a new series' samples; MetricsKeep bounds
// a series.
const (
	MetricsEvery = 5 * time.Second
	MetricsKeep  = 360
)

// metricsRecheck is how often a series whose sandbox is not running is
// checked for a deleted sandbox.
const metricsRecheck = time.Minute

// metricsParallel bounds the Stats calls in flight of one round.
const metricsParallel = 8

// metricsHistory is the series of every sandbox seen running.
type metricsHistory struct {
	every time.Duration
	// keep bounds a series, perLevel the samples at one spacing.
	keep, perLevel int
	// store keeps the series across restarts and replicas
	// (historystore.go); nil keeps them in memory only.
	store store.MetricHistory
	// flushEvery is how often the changed series are written (MetricsFlush).
	flushEvery time.Duration
	// mu guards all and the series in it.
	mu  sync.Mutex
	all map[string]*metricSeries
}

// metricSeries is one sandbox's samples, oldest first.
type metricSeries struct {
	// exec and last are the execution and the reading the next sample's
	// CPU use is measured from.
	exec    string
	last    *nodev1.ExecStats
	samples []Metric
	// checked is when the sandbox was last seen running, or last looked up
	// while not running.
	checked time.Time
	// dirty is set by a sample not yet written to the store.
	dirty bool
}

func newMetricsHistory(every time.Duration, keep int) *metricsHistory {
	return &metricsHistory{every: every, keep: max(keep, 2), perLevel: max(keep/16, 2), flushEvery: MetricsFlush,
		all: map[string]*metricSeries{}}
}

// observe adds reading st of sandbox id's execution exec: a sample when a
// spacing has passed since the reading the last sample was made from. The
// first reading of an execution only starts its CPU interval (a resumed or
// restored sandbox runs a new execution, whose counters start again).
func (h *metricsHistory) observe(id, exec string, st *nodev1.ExecStats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.all[id]
	if s == nil {
		s = &metricSeries{}
		h.all[id] = s
	}
	s.checked = st.Time
	if s.last == nil || s.exec != exec || st.Time.Before(s.last.Time) {
		s.exec, s.last = exec, st
		return
	}
	// A tenth of the spacing early is on time: the rounds that read the
	// sandboxes are spaced by a ticker, not exactly.
	if st.Time.Sub(s.last.Time) < h.every-h.every/10 {
		return
	}
	m := e2bMetricOf(s.last, st)
	m.span = st.Time.Sub(s.last.Time)
	s.samples = append(s.samples, m)
	s.last = st
	s.samples = h.compact(s.samples)
	s.dirty = true
}

// compact keeps a series within its bound as an exponential histogram:
// each sample has a level (0 when taken; two level-k samples merge into one
// of level k+1), levels decrease from the oldest samples to the newest, and
// when a level holds more than perLevel samples its two oldest merge, which
// may cascade. Past the bound itself (a life longer than the levels reach)
// the two oldest samples merge.
func (h *metricsHistory) compact(ss []Metric) []Metric {
	for {
		merged := false
		for i := 0; i < len(ss); {
			j := i
			for j < len(ss) && ss[j].level == ss[i].level {
				j++
			}
			if j-i > h.perLevel {
				ss = mergeAt(ss, i)
				merged = true
				break
			}
			i = j
		}
		if !merged {
			break
		}
	}
	for len(ss) > h.keep {
		ss = mergeAt(ss, 0)
	}
	return ss
}

// mergeAt merges samples i and i+1 into one at the later one's time
// covering both, with their CPU use weighted by the time each covered, so
// the CPU time the series accounts is kept; memory and disk are the later
// one's.
func mergeAt(ss []Metric, i int) []Metric {
	a, b := ss[i], ss[i+1]
	m := b
	m.span = a.span + b.span
	m.level = max(a.level, b.level) + 1
	if m.span > 0 {
		pct := (a.CPUUsedPct*float64(a.span) + b.CPUUsedPct*float64(b.span)) / float64(m.span)
		m.CPUUsedPct = math.Round(pct*100) / 100
	}
	ss[i] = m
	return append(ss[:i+1], ss[i+2:]...)
}

// window returns a copy of sandbox id's samples whose time is from second
// start to second end, both included (unix seconds, as E2B's API takes
// them).
func (h *metricsHistory) window(id string, start, end int64) []Metric {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.all[id]
	if s == nil {
		return nil
	}
	var out []Metric
	for _, m := range s.samples {
		if sec := m.Timestamp.Unix(); sec >= start && sec <= end {
			out = append(out, m)
		}
	}
	return out
}

// stale returns the sandboxes with a series that were not in running and
// have not been looked up for metricsRecheck, marking them looked up now.
func (h *metricsHistory) stale(running map[string]bool, now time.Time) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for id, s := range h.all {
		if !running[id] && now.Sub(s.checked) >= metricsRecheck {
			s.checked = now
			out = append(out, id)
		}
	}
	return out
}

// forget drops sandbox id's series.
func (h *metricsHistory) forget(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.all, id)
}

// RunMetrics samples every running sandbox every MetricsEvery and writes
// the changed series to the store every MetricsFlush until ctx is done,
// then writes them a last time (internal/server runs it beside the
// listener).
func (a *API) RunMetrics(ctx context.Context) {
	t := time.NewTicker(a.history.every)
	defer t.Stop()
	f := time.NewTicker(a.history.flushEvery)
	defer f.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), metricsStopFlush)
			defer cancel()
			if err := a.history.flush(fctx); err != nil {
				a.log.Warn("metrics history: last write to the store", "err", err)
			}
			return
		case <-t.C:
			a.sampleRound(ctx)
		case <-f.C:
			if err := a.history.flush(ctx); err != nil {
				a.log.Warn("metrics history: write to the store", "err", err)
			}
		}
	}
}

// sampleRound reads every running sandbox once, within one spacing, and
// drops the series of sandboxes that are gone.
func (a *API) sampleRound(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, a.history.every)
	defer cancel()
	sbs, err := a.svc.Running(ctx)
	if err != nil {
		a.log.Debug("metrics history: list running sandboxes", "err", err)
		return
	}
	ids := make([]string, 0, len(sbs))
	for _, sb := range sbs {
		ids = append(ids, sb.ID)
	}
	unread := a.history.load(ctx, ids)
	running := make(map[string]bool, len(sbs))
	slots := make(chan struct{}, metricsParallel)
	var wg sync.WaitGroup
	for _, sb := range sbs {
		running[sb.ID] = true
		if sb.Node == "" || sb.ExecID == "" || unread[sb.ID] {
			continue
		}
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			node, err := a.host.Node(ctx, sb.Node)
			if err != nil {
				return
			}
			if st, err := node.Stats(ctx, sb.ExecID); err == nil {
				a.history.observe(sb.ID, sb.ExecID, st)
			}
		}()
	}
	wg.Wait()
	for _, id := range a.history.stale(running, time.Now()) {
		sb, err := a.svc.ByID(ctx, id)
		if errdefs.IsNotFound(err) || err == nil && e2bState(sb.State) == "" {
			a.history.forget(id)
		}
	}
}
