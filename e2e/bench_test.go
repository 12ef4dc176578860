package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"sort"
	"testing"
	"time"
)

// Benchmarks of the foundation's hot paths through the real REST API. Run with
//
//	go test ./e2e -run '^$' -bench . -benchtime 30x
//
// Each reports p50 and p90 beside Go's mean. SPACE_BENCH_RUNTIME picks the
// runtime (default ns; vm boots a VM per create). SPACE_BENCH_TEMPLATE picks the
// template (default minimal; base is built on first use, which takes minutes:
// set SPACE_BENCH_DATA_DIR to a directory to keep it between runs).

// benchInstance starts a server for one benchmark function.
func benchInstance(b *testing.B) *instance {
	if os.Geteuid() != 0 {
		b.Skip("needs root: the all-in-one server starts the root node-manager")
	}
	dir := os.Getenv("SPACE_BENCH_DATA_DIR") // reuse built templates across runs
	if dir == "" {
		dir = b.TempDir()
	}
	in := startServer(b, dir)
	b.Cleanup(in.stop)
	if tpl := benchTemplate(); tpl != "minimal" {
		in.waitTemplate(tpl)
	}
	return in
}

func benchRuntime() string {
	if r := os.Getenv("SPACE_BENCH_RUNTIME"); r != "" {
		return r
	}
	return "ns"
}

func benchTemplate() string {
	if t := os.Getenv("SPACE_BENCH_TEMPLATE"); t != "" {
		return t
	}
	return "minimal"
}

func reportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	pick := func(p float64) float64 { return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pick(0.5), "p50-ms")
	b.ReportMetric(pick(0.9), "p90-ms")
}

func BenchmarkCreate(b *testing.B) {
	in := benchInstance(b)
	// Warm up: the runtime is offered, the template (and for vm its disk
	// image and template snapshot) is built before the timer runs.
	warm := in.createWith(benchTemplate(), benchRuntime())
	in.delete(warm.ID)
	var ds []time.Duration
	var ids []string
	for b.Loop() {
		start := time.Now()
		var sb sandbox
		if code := in.do("POST", "/v1/sandboxes", map[string]any{"template": benchTemplate(), "runtime": benchRuntime(), "memory_mib": 256}, &sb); code != http.StatusCreated {
			b.Fatalf("create: HTTP %d", code)
		}
		ds = append(ds, time.Since(start))
		ids = append(ids, sb.ID)
	}
	b.StopTimer()
	reportPercentiles(b, ds)
	for _, id := range ids {
		in.do("DELETE", "/v1/sandboxes/"+id, nil, nil)
	}
}

func BenchmarkExecTrue(b *testing.B) {
	in := benchInstance(b)
	sb := in.createWith(benchTemplate(), benchRuntime())
	defer in.do("DELETE", "/v1/sandboxes/"+sb.ID, nil, nil)
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		var res execResult
		if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"true"}}, &res); code != 200 || res.ExitCode != 0 {
			b.Fatalf("exec: HTTP %d %+v", code, res)
		}
		ds = append(ds, time.Since(start))
	}
	reportPercentiles(b, ds)
}

// BenchmarkFiles writes and reads back 64 MiB per iteration; MB/s counts both.
func BenchmarkFiles(b *testing.B) {
	in := benchInstance(b)
	sb := in.createWith(benchTemplate(), benchRuntime())
	defer in.do("DELETE", "/v1/sandboxes/"+sb.ID, nil, nil)
	const size = 64 << 20
	payload := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	b.SetBytes(2 * size)
	for b.Loop() {
		url := in.url + "/v1/sandboxes/" + sb.ID + "/files?path=/tmp/bench.bin"
		req, _ := http.NewRequestWithContext(context.Background(), "PUT", url, bytes.NewReader(payload))
		req.Header.Set("Authorization", "Bearer "+in.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusNoContent {
			b.Fatalf("write: %v %v", err, resp)
		}
		resp.Body.Close()
		req, _ = http.NewRequestWithContext(context.Background(), "GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+in.key)
		resp, err = http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("read: %v %v", err, resp)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n != size {
			b.Fatalf("read %d bytes, want %d", n, size)
		}
	}
}
