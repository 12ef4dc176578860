package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/spacesandbox/space/internal/store/postgres/pgtest"
	"github.com/spacesandbox/space/internal/store/storetest"
)

// benchStore opens a Store on a fresh database of the shared server (a
// private server with fsync off: the figures are of the store's code and
// PostgreSQL's transaction handling, not of a disk).
func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := Open(context.Background(), pgtest.Database(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func BenchmarkCreateSandbox(b *testing.B)   { storetest.BenchCreateSandbox(b, benchStore(b)) }
func BenchmarkGetSandbox(b *testing.B)      { storetest.BenchGetSandbox(b, benchStore(b)) }
func BenchmarkListSandboxes(b *testing.B)   { storetest.BenchListSandboxes(b, benchStore(b)) }
func BenchmarkNodeUsage(b *testing.B)       { storetest.BenchNodeUsage(b, benchStore(b)) }
func BenchmarkUpdateSandbox(b *testing.B)   { storetest.BenchUpdateSandbox(b, benchStore(b)) }
func BenchmarkRecordHeartbeat(b *testing.B) { storetest.BenchRecordHeartbeat(b, benchStore(b)) }
func BenchmarkPutMetricSeries(b *testing.B) { storetest.BenchPutMetricSeries(b, benchStore(b)) }

// BenchmarkCreateSandboxParallel: sandbox inserts from concurrent callers
// sharing the pool, as one replica's API handlers do (-cpu sets how many).
func BenchmarkCreateSandboxParallel(b *testing.B) {
	s := benchStore(b)
	tenant := storetest.BenchTenant(b, s)
	ctx := context.Background()
	b.ResetTimer() // setup made a database
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.CreateSandbox(ctx, storetest.BenchSandbox(tenant)); err != nil {
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
	a := benchStore(b)
	tenant := storetest.BenchTenant(b, a)
	ctx := context.Background()
	other, err := Open(ctx, a.cfg.ConnString())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { other.Close() })
	var n atomic.Int64
	b.ResetTimer() // setup made a database
	b.RunParallel(func(pb *testing.PB) {
		s := []*Store{a, other}[n.Add(1)%2]
		sb := storetest.BenchSandbox(tenant)
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
