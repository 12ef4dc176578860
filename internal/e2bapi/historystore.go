package e2bapi

import (
	"context"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// The history is kept in the store too (store.MetricHistory), so that a
// restarted control plane, or another replica, serves a sandbox's series
// from its start rather than from its own. The replica keeps the series
// it samples in memory, as before, and writes every series that changed
// since its last flush in one transaction every MetricsFlush (and once
// more when it stops): a series is one row rewritten whole, at its bound
// 360 samples of about 130 bytes (about 47 KiB), never a write per sample.
// At 1,000 running sandboxes that is one transaction of 1,000 rows a
// minute, about 17 rows and 0.8 MB a second at the bound
// (BenchmarkPutMetricSeries in internal/store/sqlite and postgres), where a
// write per sample would be 200 transactions a second. A crash (not a
// stop) loses at most the samples since the last flush.
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

// metricsStopFlush bounds the last flush when the history stops.
const metricsStopFlush = 5 * time.Second

// load reads from the store the series of the sandboxes in ids this
// replica has none of, so their sampling goes on from it. One that the
// store has none of starts empty; a read that fails is retried next round.
func (h *metricsHistory) load(ctx context.Context, ids []string) {
	if h.store == nil {
		return
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
			continue
		}
		h.mu.Lock()
		if _, ok := h.all[id]; !ok {
			h.all[id] = &metricSeries{samples: metricsOf(ser.Samples), checked: time.Now()}
		}
		h.mu.Unlock()
	}
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
	if err := h.store.PutMetricSeries(ctx, batch); err != nil {
		h.mu.Lock()
		for _, b := range batch {
			if s := h.all[b.SandboxID]; s != nil {
				s.dirty = true
			}
		}
		h.mu.Unlock()
		return err
	}
	return nil
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
