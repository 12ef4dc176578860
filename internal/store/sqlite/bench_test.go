package sqlite

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/store"

	"github.com/spacesandbox/space/internal/store/storetest"
)

func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "space.db"))
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

// BenchmarkBurstCreates: a burst of 50 concurrent creates (a sandbox with
// its events, within quota: what each create of a burst commits), each
// write alone in its transaction (the old path) and group-committed. One
// op is one burst; per write: p50/p99 latency and the process's CPU.
func BenchmarkBurstCreates(b *testing.B) {
	for _, mode := range []struct {
		name string
		max  int
	}{{"alone", 1}, {"group", 0}} {
		b.Run(mode.name, func(b *testing.B) {
			s := benchStore(b)
			s.g.max = mode.max
			tenant := storetest.BenchTenant(b, s)
			ctx := context.Background()
			const burst = 50
			var lat []time.Duration
			cpu0 := processCPU(b)
			for b.Loop() {
				var wg sync.WaitGroup
				d := make([]time.Duration, burst)
				for i := range burst {
					wg.Go(func() {
						sb := storetest.BenchSandbox(tenant)
						ev := []store.Event{{SandboxID: sb.ID, Time: time.Now().UTC(), Type: "scheduled", Message: "bench"}}
						t0 := time.Now()
						if err := s.CreateSandboxWithinQuotaAndEvents(ctx, sb, ev); err != nil {
							b.Error(err)
						}
						d[i] = time.Since(t0)
					})
				}
				wg.Wait()
				lat = append(lat, d...)
			}
			cpu := processCPU(b) - cpu0
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(cpu.Microseconds())/float64(len(lat)), "cpu-µs/write")
		})
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
