package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/postgres/pgtest"
)

// benchStore opens a Store on a fresh database of the shared server (a
// private server with fsync off: the figures are of the store's code and
// PostgreSQL's transaction handling, not of a disk).
func benchStore(b *testing.B) (*Store, string) {
	b.Helper()
	ctx := context.Background()
	s, err := Open(ctx, pgtest.Database(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "bench", CreatedAt: time.Now().UTC()}
	if err := s.CreateTenant(ctx, tn); err != nil {
		b.Fatal(err)
	}
	if err := s.CreateTemplate(ctx, store.Template{Name: "minimal", Source: "builtin:minimal", State: store.TemplateReady}); err != nil {
		b.Fatal(err)
	}
	return s, tn.ID
}

// BenchmarkCreateSandbox: one durable sandbox insert (every create does one).
func BenchmarkCreateSandbox(b *testing.B) {
	s, tenant := benchStore(b)
	ctx := context.Background()
	for b.Loop() {
		sb := sandbox.New(tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, time.Now())
		if err := s.CreateSandbox(ctx, sb); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpdateSandbox: one optimistic-concurrency update of a sandbox
// (every lifecycle step writes one or more).
func BenchmarkUpdateSandbox(b *testing.B) {
	s, tenant := benchStore(b)
	ctx := context.Background()
	sb := sandbox.New(tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, time.Now())
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

// BenchmarkCreateSandboxParallel: sandbox inserts from concurrent callers
// sharing the pool, as one replica's API handlers do (-cpu sets how many).
func BenchmarkCreateSandboxParallel(b *testing.B) {
	s, tenant := benchStore(b)
	ctx := context.Background()
	b.ResetTimer() // setup made a database
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			sb := sandbox.New(tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, time.Now())
			if err := s.CreateSandbox(ctx, sb); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkUpdateSandboxTwoReplicas: read-modify-write of separate sandboxes
// from two Stores on one database, as two replicas reconciling different
// sandboxes do.
func BenchmarkUpdateSandboxTwoReplicas(b *testing.B) {
	a, tenant := benchStore(b)
	ctx := context.Background()
	other, err := Open(ctx, a.p.cfg.ConnString())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { other.Close() })
	var n atomic.Int64
	b.ResetTimer() // setup made a database
	b.RunParallel(func(pb *testing.PB) {
		s := []*Store{a, other}[n.Add(1)%2]
		sb := sandbox.New(tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, time.Now())
		if err := s.CreateSandbox(ctx, sb); err != nil {
			b.Error(err)
			return
		}
		for i := 0; pb.Next(); i++ {
			cur, err := s.GetSandboxByID(ctx, sb.ID)
			if err != nil {
				b.Error(err)
				return
			}
			cur.Reason = fmt.Sprint(i)
			if err := s.UpdateSandbox(ctx, cur); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
