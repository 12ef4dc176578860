package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// metricRow is a store.MetricSample as sandbox_metrics.samples encodes it:
// short keys, times in Unix nanoseconds, so a series at its bound of 360
// samples is about 40 KiB.
type metricRow struct {
	T  int64   `json:"t"`
	S  int64   `json:"s"`
	L  int     `json:"l,omitempty"`
	C  int     `json:"c"`
	P  float64 `json:"p"`
	MU uint64  `json:"mu"`
	MT uint64  `json:"mt"`
	MC *uint64 `json:"mc,omitempty"`
	DU *uint64 `json:"du,omitempty"`
	DT *uint64 `json:"dt,omitempty"`
}

func encodeSamples(ss []store.MetricSample) (string, error) {
	rows := make([]metricRow, len(ss))
	for i, m := range ss {
		rows[i] = metricRow{T: ts(m.Time), S: int64(m.Span), L: m.Level, C: m.CPUCount, P: m.CPUUsedPct,
			MU: m.MemUsed, MT: m.MemTotal, MC: m.MemCache, DU: m.DiskUsed, DT: m.DiskTotal}
	}
	b, err := json.Marshal(rows)
	return string(b), err
}

func decodeSamples(s string) ([]store.MetricSample, error) {
	var rows []metricRow
	if err := json.Unmarshal([]byte(s), &rows); err != nil {
		return nil, err
	}
	out := make([]store.MetricSample, len(rows))
	for i, r := range rows {
		out[i] = store.MetricSample{Time: fromTS(r.T), Span: time.Duration(r.S), Level: r.L, CPUCount: r.C, CPUUsedPct: r.P,
			MemUsed: r.MU, MemTotal: r.MT, MemCache: r.MC, DiskUsed: r.DU, DiskTotal: r.DT}
	}
	return out, nil
}

// PutMetricSeries implements store.MetricHistory: one transaction, one
// statement a series; a series whose sandbox has no row is skipped by the
// statement itself (INSERT … SELECT … WHERE EXISTS), so a flush racing a
// delete never brings a series back.
func (s *Store) PutMetricSeries(ctx context.Context, ss []store.MetricSeries) error {
	if len(ss) == 0 {
		return nil
	}
	enc := make([]string, len(ss))
	for i, m := range ss {
		if m.SandboxID == "" {
			return fmt.Errorf("put metric series: empty sandbox id: %w", errdefs.ErrInvalidArgument)
		}
		if len(m.Samples) > store.MaxMetricSamples {
			return fmt.Errorf("sandbox %s: put metric series: %d samples, want at most %d: %w",
				m.SandboxID, len(m.Samples), store.MaxMetricSamples, errdefs.ErrInvalidArgument)
		}
		var err error
		if enc[i], err = encodeSamples(m.Samples); err != nil {
			return fmt.Errorf("sandbox %s: encode metric series: %w", m.SandboxID, err)
		}
	}
	at := ts(now())
	return s.db.Write(ctx, func(tx Tx) error {
		for i, m := range ss {
			_, err := tx.Exec(ctx, `INSERT INTO sandbox_metrics (sandbox_id, samples, updated_at)
				SELECT CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS BIGINT) WHERE EXISTS (SELECT 1 FROM sandboxes WHERE id = ?)
				ON CONFLICT (sandbox_id) DO UPDATE SET samples = excluded.samples, updated_at = excluded.updated_at`,
				m.SandboxID, enc[i], at, m.SandboxID)
			if err != nil {
				return fmt.Errorf("sandbox %s: put metric series: %w", m.SandboxID, err)
			}
		}
		return nil
	})
}

// GetMetricSeries implements store.MetricHistory.
func (s *Store) GetMetricSeries(ctx context.Context, id string) (store.MetricSeries, error) {
	var samples string
	var at int64
	err := s.db.QueryRow(ctx, `SELECT samples, updated_at FROM sandbox_metrics WHERE sandbox_id = ?`, id).Scan(&samples, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return store.MetricSeries{}, fmt.Errorf("sandbox %s: metric series: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return store.MetricSeries{}, fmt.Errorf("sandbox %s: get metric series: %w", id, err)
	}
	ms, err := decodeSamples(samples)
	if err != nil {
		return store.MetricSeries{}, fmt.Errorf("sandbox %s: decode metric series: %w", id, err)
	}
	return store.MetricSeries{SandboxID: id, Samples: ms, UpdatedAt: fromTS(at)}, nil
}
