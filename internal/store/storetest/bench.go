package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// The Bench functions measure the store's hot paths on an empty store s;
// each backend runs them from its own benchmarks, under the same names:
//
//	func BenchmarkCreateSandbox(b *testing.B) { storetest.BenchCreateSandbox(b, openFresh(b)) }

// BenchTenant creates the tenant and the "minimal" template a benchmark's
// sandboxes use, and returns the tenant's id.
func BenchTenant(b *testing.B, s store.Store) string {
	b.Helper()
	ctx := context.Background()
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "bench", CreatedAt: time.Now().UTC()}
	if err := s.CreateTenant(ctx, tn); err != nil {
		b.Fatal(err)
	}
	if err := s.CreateTemplate(ctx, store.Template{Name: "minimal", Source: "builtin:minimal", State: store.TemplateReady}); err != nil {
		b.Fatal(err)
	}
	return tn.ID
}

// BenchSandbox returns a new sandbox of tenant as the benchmarks create it.
func BenchSandbox(tenant string) *sandbox.Sandbox {
	return sandbox.New(tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, time.Now())
}

// BenchCreateSandbox: one durable sandbox insert (every create does one).
func BenchCreateSandbox(b *testing.B, s store.Store) {
	tenant := BenchTenant(b, s)
	ctx := context.Background()
	for b.Loop() {
		if err := s.CreateSandbox(ctx, BenchSandbox(tenant)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchGetSandbox: one read of a sandbox by id (every API call on a sandbox
// and every reconcile pass makes one).
func BenchGetSandbox(b *testing.B, s store.Store) {
	tenant := BenchTenant(b, s)
	ctx := context.Background()
	sb := BenchSandbox(tenant)
	if err := s.CreateSandbox(ctx, sb); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.GetSandbox(ctx, tenant, sb.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchListSandboxes: a tenant's list of 100 sandboxes (the API's list, the
// reconciler's resync).
func BenchListSandboxes(b *testing.B, s store.Store) {
	tenant := BenchTenant(b, s)
	ctx := context.Background()
	for range 100 {
		if err := s.CreateSandbox(ctx, BenchSandbox(tenant)); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		list, err := s.ListSandboxes(ctx, store.SandboxFilter{Tenant: tenant})
		if err != nil || len(list) != 100 {
			b.Fatalf("ListSandboxes = %d, %v; want 100", len(list), err)
		}
	}
}

// BenchNodeUsage: what placement reads per create with 100 sandboxes on a
// node (one aggregate; before it, ListSandboxes of every sandbox: compare
// with BenchListSandboxes).
func BenchNodeUsage(b *testing.B, s store.Store) {
	tenant := BenchTenant(b, s)
	ctx := context.Background()
	for range 100 {
		sb := BenchSandbox(tenant)
		sb.Node = "n1"
		if err := s.CreateSandbox(ctx, sb); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		u, err := s.NodeUsage(ctx)
		if err != nil || u["n1"].Sandboxes != 100 {
			b.Fatalf("NodeUsage = %+v, %v; want 100 sandboxes on n1", u, err)
		}
	}
}

// BenchUpdateSandbox: one optimistic-concurrency update of a sandbox (every
// lifecycle step writes one or more).
func BenchUpdateSandbox(b *testing.B, s store.Store) {
	tenant := BenchTenant(b, s)
	ctx := context.Background()
	sb := BenchSandbox(tenant)
	if err := s.CreateSandbox(ctx, sb); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		cur, err := s.GetSandboxByID(ctx, sb.ID)
		if err != nil {
			b.Fatal(err)
		}
		cur.Reason = time.Now().String()
		if err := s.UpdateSandbox(ctx, cur); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchRecordHeartbeat: one heartbeat that re-registers a node (a node
// whose record changed, or one coming back).
func BenchRecordHeartbeat(b *testing.B, s store.Store) {
	ctx := context.Background()
	n := store.Node{ID: "node-bench", Address: "tcp://10.0.0.1:7071", Runtimes: []string{"ns", "vm"},
		Capacity: store.Resources{CPUs: 8, MemoryMiB: 16384, DiskMiB: 100000}}
	for b.Loop() {
		n.LastHeartbeat = time.Now()
		if _, err := s.RecordHeartbeat(ctx, n); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchPutMetricSeries: one flush of the metrics history at 1,000 running
// sandboxes, each series at its bound of 360 samples (one transaction a
// minute in production: internal/e2bapi/historystore.go). It reports the
// bytes a flush writes.
func BenchPutMetricSeries(b *testing.B, s store.Store) {
	tenant := BenchTenant(b, s)
	ctx := context.Background()
	const sandboxes, samples = 1000, 360
	mem := uint64(200 << 20)
	batch := make([]store.MetricSeries, sandboxes)
	for i := range batch {
		sb := BenchSandbox(tenant)
		if err := s.CreateSandbox(ctx, sb); err != nil {
			b.Fatal(err)
		}
		ss := make([]store.MetricSample, samples)
		t0 := time.Now().UTC()
		for j := range ss {
			ss[j] = store.MetricSample{Time: t0.Add(time.Duration(j) * 5 * time.Second), Span: 5 * time.Second, Level: j / 22,
				CPUCount: 2, CPUUsedPct: 12.34, MemUsed: 123456789, MemTotal: 268435456, MemCache: &mem, DiskUsed: &mem, DiskTotal: &mem}
		}
		batch[i] = store.MetricSeries{SandboxID: sb.ID, Samples: ss}
	}
	b.ResetTimer()
	for range b.N {
		if err := s.PutMetricSeries(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
}
