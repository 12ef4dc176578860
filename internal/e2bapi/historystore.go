package e2bapi

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// The history is kept in the store too (store.MetricHistory), so that a
// restarted control plane, or another replica, serves a sandbox's series
// from its start rather than from its own. The replica keeps the series
// it samples in memory, as before, and writes every series that changed
// since its last flush every MetricsFlush (and once more when it stops),
// metricsFlushBatch series a transaction: a series is one row rewritten
// whole, at its bound 360 samples of about 138 bytes (49,689 bytes),
// never a write per sample. At 1,000 running sandboxes at the bound that
// is 10 transactions of 100 rows a minute, about 17 rows and 0.83 MB a
// second, where a write per sample would be 200 transactions a second.
// BenchmarkPutMetricSeries (internal/store/sqlite and postgres) writes the
// 1,000 in one transaction in 0.45 to 0.58 s on SQLite, 0.71 to 1.09 s on
// PostgreSQL (2 shared cores): about 1 % of a core; batches of 100 keep
// SQLite's one writer from being held for more than about 60 ms. A crash
// (not a stop) loses at most the samples since the last flush.
//
// A sandbox's series is read from the store before its first sample on
// this replica (so the series goes on, its old samples kept and merged as
// they would have been), and a request for a sandbox this replica has no
// series of (one paused since the restart, or sampled only by another
// replica so far) is served from the store. Two replicas sampling the
// same sandbox each write their series, and the last flush wins: both
// start from what the store held, so they differ at most by the samples
// since then.

// MetricsFlush is how often the history writes the series that changed.
const MetricsFlush = time.Minute

// metricsFlushBatch is how many series one store transaction writes.
const metricsFlushBatch = 100

// metricsStopFlush bounds the last flush when the history stops.
const metricsStopFlush = 5 * time.Second

// load reads from the store the series of the sandboxes in ids this
// replica has none of, so their sampling goes on from it. One that the
// store has none of starts empty. It returns those whose read failed: they
// are not sampled this round (a sample would start a series that the next
// flush writes over the stored one), and read again the next.
func (h *metricsHistory) load(ctx context.Context, ids []string) (failed map[string]bool) {
	if h.store == nil {
		return nil
	}
	for _, id := range ids {
		h.mu.Lock()
		_, ok := h.all[id]
		h.mu.Unlock()
		if ok {
			continue
		}
		ser, err := h.store.GetMetricSeries(ctx, id)
		if err != nil && !errdefs.IsNotFound(err) {
			if failed == nil {
				failed = map[string]bool{}
			}
			failed[id] = true
			continue
		}
		h.mu.Lock()
		if _, ok := h.all[id]; !ok {
			h.all[id] = &metricSeries{samples: metricsOf(ser.Samples), checked: time.Now()}
		}
		h.mu.Unlock()
	}
	return failed
}

// read is window, from the store when this replica has no series of
// sandbox id.
func (h *metricsHistory) read(ctx context.Context, id string, start, end int64) ([]Metric, error) {
	h.mu.Lock()
	_, ok := h.all[id]
	h.mu.Unlock()
	if ok || h.store == nil {
		return h.window(id, start, end), nil
	}
	ser, err := h.store.GetMetricSeries(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Metric
	for _, m := range metricsOf(ser.Samples) {
		if sec := m.Timestamp.Unix(); sec >= start && sec <= end {
			out = append(out, m)
		}
	}
	return out, nil
}

// flush writes every series with a sample since the last flush, in one
// store call; a failed write leaves them to the next flush.
func (h *metricsHistory) flush(ctx context.Context) error {
	if h.store == nil {
		return nil
	}
	h.mu.Lock()
	var batch []store.MetricSeries
	for id, s := range h.all {
		if s.dirty {
			s.dirty = false
			batch = append(batch, store.MetricSeries{SandboxID: id, Samples: samplesOf(s.samples)})
		}
	}
	h.mu.Unlock()
	var failed []store.MetricSeries
	var first error
	for len(batch) > 0 {
		n := min(len(batch), metricsFlushBatch)
		if err := h.store.PutMetricSeries(ctx, batch[:n]); err != nil {
			failed = append(failed, batch[:n]...)
			first = cmp.Or(first, err)
		}
		batch = batch[n:]
	}
	if first == nil {
		return nil
	}
	h.mu.Lock()
	for _, b := range failed {
		if s := h.all[b.SandboxID]; s != nil {
			s.dirty = true
		}
	}
	h.mu.Unlock()
	return fmt.Errorf("write %d series: %w", len(failed), first)
}

func samplesOf(ms []Metric) []store.MetricSample {
	out := make([]store.MetricSample, len(ms))
	for i, m := range ms {
		out[i] = store.MetricSample{Time: m.Timestamp, Span: m.span, Level: m.level, CPUCount: m.CPUCount,
			CPUUsedPct: m.CPUUsedPct, MemUsed: m.MemUsed, MemTotal: m.MemTotal, MemCache: m.MemCache,
			DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal}
	}
	return out
}

func metricsOf(ss []store.MetricSample) []Metric {
	out := make([]Metric, len(ss))
	for i, s := range ss {
		out[i] = Metric{Timestamp: s.Time, TimestampUnix: s.Time.Unix(), CPUCount: s.CPUCount, CPUUsedPct: s.CPUUsedPct,
			MemUsed: s.MemUsed, MemTotal: s.MemTotal, MemCache: s.MemCache, DiskUsed: s.DiskUsed, DiskTotal: s.DiskTotal,
			span: s.Span, level: s.Level}
	}
	return out
}
