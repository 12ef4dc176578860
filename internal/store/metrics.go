package store

import (
	"context"
	"time"
)

// MetricSample is one sample of a sandbox's metrics history
// (internal/e2bapi/history.go): its CPU use over Span before Time, its
// memory and disk at Time. Level is how many times it was merged from two
// neighbours; MemCache, DiskUsed and DiskTotal are nil where the node does
// not report them.
type MetricSample struct {
	Time       time.Time
	Span       time.Duration
	Level      int
	CPUCount   int
	CPUUsedPct float64
	MemUsed    uint64
	MemTotal   uint64
	MemCache   *uint64
	DiskUsed   *uint64
	DiskTotal  *uint64
}

// MetricSeries is one sandbox's metrics history, oldest sample first.
type MetricSeries struct {
	SandboxID string
	Samples   []MetricSample
	// UpdatedAt is when the series was last written.
	UpdatedAt time.Time
}

// MaxMetricSamples bounds the samples of a stored series: a longer one is
// InvalidArgument (the history keeps 360, merging older ones).
const MaxMetricSamples = 4096

// MetricHistory stores the sandboxes' metrics histories, so that a
// restarted control plane and every replica serve the same series.
// Deleting a sandbox's row deletes its series.
type MetricHistory interface {
	// PutMetricSeries replaces the series of every sandbox in ss, in one
	// transaction: the history writes every series that changed since its
	// last flush at once, not a write per sample. A series of a sandbox
	// with no row (deleted in the meantime) is skipped, never stored.
	PutMetricSeries(ctx context.Context, ss []MetricSeries) error
	// GetMetricSeries returns sandbox id's series or ErrNotFound.
	GetMetricSeries(ctx context.Context, id string) (MetricSeries, error)
}
