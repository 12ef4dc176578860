package e2b_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// BenchmarkCodeInterpreterWarmPool measures, with the published
// @e2b/code-interpreter SDK, a sandbox of the SDK's default template claimed
// from a warm pool (`space server --warm-pool code-interpreter:RT=1`, the
// size E2B's create asks for): the create, the first runCode('1+1') (the
// code interpreter's first-call cost), and then runCode('1+1') against a
// raw commands.run('true') in the same sandbox, interleaved
// (codeinterpreter_life.mjs, CI_ROUNDS each). One iteration is one sandbox:
// run it with -benchtime=3x for three rounds (the testing package first
// runs each sub-benchmark once with N=1, on a server of its own, so that
// is a fourth); each round's figures are logged, the metrics are the
// means of a run's rounds. A create that found the pool empty
// fails the round (its figures would be a cold start's).
// SPACE_TEST_RUNCODE_RUNTIMES (e.g. "ns") narrows the runtimes.
//
//	SPACE_TEST_CACHE_DIR=/var/cache/space go test ./compat/e2b/ -run '^$' \
//	  -bench CodeInterpreterWarmPool -benchtime=3x -timeout 60m
func BenchmarkCodeInterpreterWarmPool(b *testing.B) {
	env := codeInterpreterEnv(b)
	runtimes := []string{"ns", "vm"}
	if only := os.Getenv("SPACE_TEST_RUNCODE_RUNTIMES"); only != "" {
		runtimes = strings.Split(only, ",")
	}
	for _, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			srv := env.server(b, rt, "--warm-pool", "code-interpreter:"+rt+"=1")
			var sum struct{ create, first, code, exec float64 }
			n := 0
			for range b.N {
				hits := waitPoolReady(b, srv, rt)
				if p := srv.WaitNoMemoryPressure(b, 5*time.Minute); p != "" {
					b.Fatalf("%s: the node reports memory pressure for 5m (%s): a create would be refused", rt, p)
				}
				out := srv.runScriptEnv(b, env.work, "codeinterpreter_life.mjs", "E2B_RUNTIME="+rt, "CI_ROUNDS=20")
				if got := poolHits(b, srv, rt, hits); got != hits+1 {
					b.Fatalf("%s: the create did not claim from the warm pool (hits %d, then %d)", rt, hits, got)
				}
				var t struct {
					Create  float64 `json:"create"`
					First   float64 `json:"first"`
					CodeP50 float64 `json:"code_p50"`
					ExecP50 float64 `json:"exec_p50"`
				}
				_, line, ok := strings.Cut(out, "timing-json: ")
				if !ok {
					b.Fatalf("%s: no timing line in:\n%s", rt, out)
				}
				line, _, _ = strings.Cut(line, "\n")
				if err := json.Unmarshal([]byte(line), &t); err != nil {
					b.Fatalf("%s: timing line %q: %v", rt, line, err)
				}
				b.Logf("%s round %d: create %v ms, first runCode('1+1') %v ms, runCode('1+1') p50 %v ms, commands.run('true') p50 %v ms, ratio %.2f",
					rt, n+1, t.Create, t.First, t.CodeP50, t.ExecP50, t.CodeP50/t.ExecP50)
				sum.create, sum.first, sum.code, sum.exec = sum.create+t.Create, sum.first+t.First, sum.code+t.CodeP50, sum.exec+t.ExecP50
				n++
			}
			if n > 0 {
				f := float64(n)
				b.ReportMetric(sum.create/f, "create-ms")
				b.ReportMetric(sum.first/f, "first-runcode-ms")
				b.ReportMetric(sum.code/f, "runcode-p50-ms")
				b.ReportMetric(sum.exec/f, "exec-true-p50-ms")
				b.ReportMetric(sum.code/sum.exec, "runcode/exec")
			}
		})
	}
}

// poolStatus is the code-interpreter pool of runtime rt on srv's node.
func poolStatus(b testing.TB, srv *server, rt string) (ready int, hits uint64) {
	var list struct {
		Nodes []struct {
			WarmPool []struct {
				Template, Runtime string
				Ready             int
				Hits              uint64
			} `json:"warm_pool"`
		}
	}
	if err := srv.Get("/v1/nodes", &list); err != nil {
		b.Fatalf("GET /v1/nodes: %v", err)
	}
	for _, n := range list.Nodes {
		for _, p := range n.WarmPool {
			if p.Template == "code-interpreter" && p.Runtime == rt {
				ready, hits = ready+p.Ready, hits+p.Hits
			}
		}
	}
	return ready, hits
}

// poolHits waits (the node reports its pool with its heartbeat) until the
// pool's hits pass before, and returns them.
func poolHits(b testing.TB, srv *server, rt string, before uint64) uint64 {
	var hits uint64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if _, hits = poolStatus(b, srv, rt); hits > before {
			break
		}
	}
	return hits
}

// waitPoolReady waits until the pool holds a prepared sandbox and returns
// its hits so far.
func waitPoolReady(b *testing.B, srv *server, rt string) uint64 {
	b.StopTimer()
	defer b.StartTimer()
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		if ready, hits := poolStatus(b, srv, rt); ready > 0 {
			return hits
		}
	}
	b.Fatalf("%s: the code-interpreter warm pool is still empty after 10m:\n%s", rt, srv.Logs())
	return 0
}
