package reconcile

import (
	"testing"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/sandbox"
)

// BenchmarkPass measures a pass over a running sandbox with nothing to do,
// bare and under its lease (acquire and release: the cost of claiming work
// when several replicas share the store), on SQLite.
func BenchmarkPass(b *testing.B) {
	for _, tc := range []struct {
		name    string
		claimed bool
	}{{"bare", false}, {"claimed", true}} {
		b.Run(tc.name, func(b *testing.B) {
			h := newHarness(b, Config{}, false)
			sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
			h.observe("n1", exec(sb, nodev1.ExecRunning))
			b.ResetTimer()
			for b.Loop() {
				var err error
				if tc.claimed {
					_, err = h.r.claimed(h.ctx, sb.ID)
				} else {
					_, err = h.r.reconcile(h.ctx, sb.ID)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
