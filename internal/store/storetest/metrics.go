package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// testMetricHistory: a series reads back as written (every field, nil
// pointers kept nil), a put replaces it whole, one put writes many
// sandboxes, a sandbox with no row is skipped, a series past the bound is
// refused, and deleting the sandbox deletes its series.
func testMetricHistory(t *testing.T, s store.Store) {
	tn := newTenant(t, s, "acme", at(1))
	sb1 := newSandbox(t, s, tn.ID, at(2))
	sb2 := newSandbox(t, s, tn.ID, at(3))

	_, err := s.GetMetricSeries(ctx(t), sb1.ID)
	wantClass(t, "GetMetricSeries before a put", err, errdefs.ErrNotFound)

	u := func(v uint64) *uint64 { return &v }
	first := []store.MetricSample{
		{Time: at(4), Span: 5 * time.Second, CPUCount: 2, CPUUsedPct: 12.5, MemUsed: 100 << 20, MemTotal: 256 << 20},
		{Time: at(5), Span: 10 * time.Second, Level: 1, CPUCount: 2, CPUUsedPct: 0.25, MemUsed: 101 << 20, MemTotal: 256 << 20,
			MemCache: u(7 << 20), DiskUsed: u(3 << 20), DiskTotal: u(1 << 30)},
	}
	other := []store.MetricSample{{Time: at(6), Span: 5 * time.Second, CPUCount: 1, CPUUsedPct: 99, MemUsed: 1, MemTotal: 2}}
	must(t, "PutMetricSeries", s.PutMetricSeries(ctx(t), []store.MetricSeries{
		{SandboxID: sb1.ID, Samples: first},
		{SandboxID: sb2.ID, Samples: other},
		{SandboxID: "sb-gone", Samples: other},
	}))
	want := map[string][]store.MetricSample{sb1.ID: first, sb2.ID: other}
	for id, w := range want {
		got, err := s.GetMetricSeries(ctx(t), id)
		must(t, "GetMetricSeries "+id, err)
		if !reflect.DeepEqual(got.Samples, w) {
			t.Errorf("GetMetricSeries %s = %+v, want %+v", id, got.Samples, w)
		}
		if got.SandboxID != id || got.UpdatedAt.IsZero() {
			t.Errorf("GetMetricSeries %s: id %q updated %v, want the id and a time", id, got.SandboxID, got.UpdatedAt)
		}
	}
	_, err = s.GetMetricSeries(ctx(t), "sb-gone")
	wantClass(t, "GetMetricSeries of a sandbox with no row", err, errdefs.ErrNotFound)

	// A put replaces the series whole.
	must(t, "PutMetricSeries again", s.PutMetricSeries(ctx(t), []store.MetricSeries{{SandboxID: sb1.ID, Samples: first[1:]}}))
	if got, err := s.GetMetricSeries(ctx(t), sb1.ID); err != nil || !reflect.DeepEqual(got.Samples, first[1:]) {
		t.Errorf("GetMetricSeries after a second put = %+v, %v; want %+v", got.Samples, err, first[1:])
	}

	long := make([]store.MetricSample, store.MaxMetricSamples+1)
	err = s.PutMetricSeries(ctx(t), []store.MetricSeries{{SandboxID: sb2.ID, Samples: long}})
	wantClass(t, "PutMetricSeries past the bound", err, errdefs.ErrInvalidArgument)

	must(t, "DeleteSandbox", s.DeleteSandbox(ctx(t), sb1.ID))
	_, err = s.GetMetricSeries(ctx(t), sb1.ID)
	wantClass(t, "GetMetricSeries of a deleted sandbox", err, errdefs.ErrNotFound)
	if _, err := s.GetMetricSeries(ctx(t), sb2.ID); err != nil {
		t.Errorf("GetMetricSeries of the other sandbox after a delete: %v", err)
	}
}
