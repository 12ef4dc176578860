package reconcile

import (
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
)

// observationsOf builds a reconciler whose node n1 was heard by this replica
// at heard and reported through the store at stored (zero: not at all), each
// report holding execs; gone marks executions this replica stopped at that
// time.
func observationsOf(t testing.TB, heard, stored time.Time, gone map[string]time.Time, execs ...string) *Reconciler {
	t.Helper()
	r := New(Config{}, openStore(t), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	report := func(at time.Time) observation {
		obs := observation{at: at, executions: map[string]nodev1.Execution{}}
		for _, id := range execs {
			obs.executions[id] = nodev1.Execution{ExecID: id, SandboxID: id[:4], State: nodev1.ExecRunning, Reason: at.String()}
		}
		return obs
	}
	r.shared, r.sharedAt = map[string]observation{}, time.Now() // fresh: not read again
	if !stored.IsZero() {
		r.shared["n1"] = report(stored)
	}
	if !heard.IsZero() {
		r.observed["n1"] = report(heard)
	}
	for id, at := range gone {
		r.gone[id] = at
	}
	return r
}

// TestObservationOfAgreesWithObservation: what observationOf says of one
// execution is what observation says of it, whichever report is fresher,
// with executions this replica stopped since a store report left out.
func TestObservationOfAgreesWithObservation(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tests := []struct {
		name          string
		heard, stored time.Time
		gone          map[string]time.Time
	}{
		{"none", time.Time{}, time.Time{}, nil},
		{"heard only", now, time.Time{}, nil},
		{"stored only", time.Time{}, now, nil},
		{"heard fresher", now, now.Add(-time.Second), nil},
		{"stored fresher", now.Add(-time.Second), now, nil},
		{"stored fresher, one stopped since", now.Add(-time.Second), now.Add(-time.Millisecond), map[string]time.Time{"bbbb-x": now}},
		{"stored fresher, one stopped before it", now.Add(-time.Second), now, map[string]time.Time{"bbbb-x": now.Add(-time.Minute)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := observationsOf(t, tt.heard, tt.stored, tt.gone, "aaaa-x", "bbbb-x")
			full, fullSeen := r.observation(t.Context(), "n1")
			for _, exec := range []string{"aaaa-x", "bbbb-x", "cccc-x"} {
				one, seen := r.observationOf(t.Context(), "n1", exec)
				if seen != fullSeen || !one.at.Equal(full.at) {
					t.Errorf("%s: observationOf seen=%v at=%v, observation seen=%v at=%v", exec, seen, one.at, fullSeen, full.at)
				}
				want := map[string]nodev1.Execution{}
				if ex, ok := full.executions[exec]; ok {
					want[exec] = ex
				}
				if got := one.executions; len(got)+len(want) > 0 && !reflect.DeepEqual(got, want) {
					t.Errorf("%s: observationOf holds %v, observation %v", exec, got, want)
				}
			}
		})
	}
}

// BenchmarkObservationOf: one sandbox's look at its node's report, the node
// running n executions: observation copies all n, observationOf one.
func BenchmarkObservationOf(b *testing.B) {
	for _, n := range []int{10, 1000} {
		execs := make([]string, n)
		for i := range execs {
			execs[i] = fmt.Sprintf("%04d-exec", i)
		}
		now := time.Now()
		r := observationsOf(b, now.Add(-time.Second), now, nil, execs...)
		b.Run(fmt.Sprintf("observation-%d", n), func(b *testing.B) {
			for b.Loop() {
				obs, _ := r.observation(b.Context(), "n1")
				_ = obs.executions[execs[0]]
			}
		})
		b.Run(fmt.Sprintf("observationOf-%d", n), func(b *testing.B) {
			for b.Loop() {
				obs, _ := r.observationOf(b.Context(), "n1", execs[0])
				_ = obs.executions[execs[0]]
			}
		})
	}
}
