package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchConcurrency is how many clients the scale-out benchmarks run at once.
const benchConcurrency = 8

// BenchmarkScaleOutCreates measures creates through the balancer of a
// scale-out cluster (PostgreSQL, S3, three nodes in their own network
// namespaces) with 1 and with 3 control-plane replicas, benchConcurrency
// clients at once: ns sandboxes of the minimal template, deleted off the
// clock, reported as creates/s. A create takes a good part of a second, so
// give it a count: `go test -run '^$' -bench ScaleOutCreates -benchtime 48x
// ./e2e` (as root; each cluster takes some 10 s to start).
func BenchmarkScaleOutCreates(b *testing.B) {
	for _, replicas := range []int{1, 3} {
		// The cluster is started once per replica count: a benchmark
		// with sub-benchmarks runs once, the sub-benchmark for every b.N.
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			c := startCluster(b, replicas, 3)
			b.Run("creates", func(b *testing.B) { c.on(b).benchCreates(b) })
		})
	}
}

// BenchmarkScaleOutRequests measures API requests (GET /v1/sandboxes/{id})
// through the balancer with 1 and with 3 replicas, benchConcurrency clients
// at once, reported as requests/s.
func BenchmarkScaleOutRequests(b *testing.B) {
	for _, replicas := range []int{1, 3} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			c := startCluster(b, replicas, 3)
			b.Run("gets", func(b *testing.B) { c.on(b).benchGets(b) })
		})
	}
}

func (c *cluster) benchCreates(b *testing.B) {
	var mu sync.Mutex
	var ids []string
	start := time.Now()
	c.parallel(b.N, func() {
		sb, code, msg := c.create(64, nil)
		if code != http.StatusCreated {
			b.Errorf("create: HTTP %d %s", code, msg)
			return
		}
		mu.Lock()
		ids = append(ids, sb.ID)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "creates/s")
	c.parallel(len(ids), func() {
		mu.Lock()
		id := ids[len(ids)-1]
		ids = ids[:len(ids)-1]
		mu.Unlock()
		c.delete(id)
	})
}

func (c *cluster) benchGets(b *testing.B) {
	b.StopTimer()
	sb := c.mustCreate(64)
	defer c.delete(sb.ID)
	b.StartTimer()
	start := time.Now()
	c.parallel(b.N, func() {
		if code := c.tryDo("GET", "/v1/sandboxes/"+sb.ID, nil, nil); code != http.StatusOK {
			b.Errorf("get: HTTP %d", code)
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "requests/s")
}

// parallel runs op n times on benchConcurrency goroutines.
func (c *cluster) parallel(n int, op func()) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				op()
			}
		}()
	}
	wg.Wait()
}
