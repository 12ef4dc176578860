package e2e

import (
	"net/http"
	"os"
	"sort"
	"testing"
	"time"
)

// BenchmarkNeighbourExec measures what a hostile sandbox costs its
// neighbour (catalogue C-1, C-4): the exec latency of a quiet sandbox while
// nothing else runs, then while another sandbox of one CPU spins on four
// threads, while it runs a fork bomb, and while it opens connections
// without end. Each noisy phase reports its p50
// and p99 and the ratio of its p99 to the idle p99 of the same run (the goal
// is ≤ 2: the noisy sandbox gets its CPUs and no more). Run with
//
//	go test ./e2e -run '^$' -bench NeighbourExec -benchtime 1x
//
// (SPACE_BENCH_RUNTIME=vm for the vm runtime). Each phase times
// neighbourExecs execs whatever -benchtime says: the figures are latencies,
// not throughput.
func BenchmarkNeighbourExec(b *testing.B) {
	in := benchInstance(b)
	quiet := in.createSized(benchTemplate(), benchRuntime(), 1)
	defer in.do("DELETE", "/v1/sandboxes/"+quiet.ID, nil, nil)
	noisy := []struct {
		name, script string
	}{
		{"spin", "for i in 1 2 3 4; do (while :; do :; done) >/dev/null 2>&1 </dev/null & done"},
		{"forkbomb", "b(){ while :; do b & done; }; b >/dev/null 2>&1 </dev/null &"},
		// Connections without end, each held 10 s, through the sandbox's
		// gateway (its flow cap) to a public address that never answers.
		{"connflood", "(while :; do nc -w 10 192.0.2.1 80 </dev/null >/dev/null 2>&1 & done) >/dev/null 2>&1 </dev/null &"},
	}
	for b.Loop() {
		idle := in.execLatencies(quiet.ID)
		b.ReportMetric(percentileMS(idle, 0.5), "idle-p50-ms")
		b.ReportMetric(percentileMS(idle, 0.99), "idle-p99-ms")
		for _, n := range noisy {
			sb := in.createSized(benchTemplate(), benchRuntime(), 1)
			if code := in.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", map[string]any{"cmd": []string{"/bin/sh", "-c", n.script}}, nil); code != http.StatusOK {
				b.Fatalf("start %s: HTTP %d", n.name, code)
			}
			time.Sleep(2 * time.Second) // let it take what it can
			d := in.execLatencies(quiet.ID)
			b.ReportMetric(percentileMS(d, 0.5), n.name+"-p50-ms")
			b.ReportMetric(percentileMS(d, 0.99), n.name+"-p99-ms")
			b.ReportMetric(percentileMS(d, 0.99)/percentileMS(idle, 0.99), n.name+"-p99/idle")
			in.do("DELETE", "/v1/sandboxes/"+sb.ID, nil, nil)
		}
	}
}

// neighbourExecs is how many execs each phase of BenchmarkNeighbourExec times.
const neighbourExecs = 100

// execLatencies times neighbourExecs execs of true in sandbox id.
func (in *instance) execLatencies(id string) []time.Duration {
	in.t.Helper()
	return in.execTimes(id, neighbourExecs)
}

// createSized creates a sandbox of cpus CPUs. A 503 (a node offers vm once
// its guest kernel is ready; a node under memory pressure, which a shared
// machine's other jobs can cause, takes no new sandbox) is retried for up to
// three minutes.
func (in *instance) createSized(template, runtime string, cpus int) sandbox {
	in.t.Helper()
	var sb struct {
		sandbox
		Message string `json:"message"`
	}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		code := in.do("POST", "/v1/sandboxes", map[string]any{"template": template, "runtime": runtime, "memory_mib": 256, "cpus": cpus}, &sb)
		if code == http.StatusCreated {
			return sb.sandbox
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			in.t.Fatalf("create: HTTP %d %s\n%s", code, sb.Message, in.logs())
		}
	}
}

// percentileMS is the p-th percentile of d in milliseconds.
func percentileMS(d []time.Duration, p float64) float64 {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[int(p*float64(len(s)-1))].Microseconds()) / 1000
}

// BenchmarkNeighbourExecHostileGuest measures what a hostile guest
// (catalogue A-3) costs its neighbour on the same node: the exec latency of
// a quiet sandbox while nothing else runs, then while another sandbox's
// guest — a real process on its real channel, the hostile harness's
// (hostileguest_test.go) — floods its bridge with PING and SETTINGS frames,
// trickles its answer a byte every 100 ms (slowloris), or never reads its
// channel. Each phase reports its p50 and p99 and the ratio of its p99 to
// the idle p99 of the same run. Run with
//
//	go test ./e2e -run '^$' -bench NeighbourExecHostileGuest -benchtime 1x
//
// Each phase times neighbourExecs execs while the hostile execution is
// starting (the node gives up on its guest after its ready timeout).
func BenchmarkNeighbourExecHostileGuest(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: the all-in-one server starts the root node-manager")
	}
	in := startHostileServer(b, b.TempDir())
	b.Cleanup(in.stop)
	quiet := in.createSized("minimal", "ns", 1)
	defer in.do("DELETE", "/v1/sandboxes/"+quiet.ID, nil, nil)
	for b.Loop() {
		idle := in.execLatencies(quiet.ID)
		b.ReportMetric(percentileMS(idle, 0.5), "idle-p50-ms")
		b.ReportMetric(percentileMS(idle, 0.99), "idle-p99-ms")
		for _, mode := range []string{"floodforever", "slowloris", "noread"} {
			var d []time.Duration
			run := runHostile(b, in, mode, func(stop <-chan struct{}) {
				// Let the abuse begin before timing.
				time.Sleep(500 * time.Millisecond)
				for len(d) < neighbourExecs {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now()
					var res execResult
					if code := in.do("POST", "/v1/sandboxes/"+quiet.ID+"/exec", map[string]any{"cmd": []string{"true"}}, &res); code != http.StatusOK || res.ExitCode != 0 {
						b.Errorf("exec true beside a guest doing %s: HTTP %d %+v", mode, code, res)
						return
					}
					d = append(d, time.Since(start))
				}
			})
			if len(d) < neighbourExecs {
				b.Fatalf("%s: only %d of %d neighbour execs ran while the hostile execution lasted (%v)", mode, len(d), neighbourExecs, run.wall)
			}
			b.ReportMetric(percentileMS(d, 0.5), mode+"-p50-ms")
			b.ReportMetric(percentileMS(d, 0.99), mode+"-p99-ms")
			b.ReportMetric(percentileMS(d, 0.99)/percentileMS(idle, 0.99), mode+"-p99/idle")
			b.ReportMetric(float64(run.bridgeHWM>>20), mode+"-bridge-peak-MiB")
			in.do("DELETE", "/v1/sandboxes/"+run.sandbox, nil, nil)
		}
	}
}
