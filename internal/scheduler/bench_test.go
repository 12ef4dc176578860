package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// BenchmarkPlace: one placement among 100 nodes (issue 7's hot path: every
// create asks it).
func BenchmarkPlace(b *testing.B) {
	st := clusterState(100, 0, time.Now())
	req := Request{Runtime: "ns", CPUs: 1, MemoryMiB: 256}
	for b.Loop() {
		if _, err := Place(req, st); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStateFrom: building the snapshot placement reads, from 100
// nodes and 10,000 sandboxes.
func BenchmarkStateFrom(b *testing.B) {
	now := time.Now()
	nodes, sbs := cluster(100, 10000, now)
	for b.Loop() {
		StateFrom(nodes, sbs, now)
	}
}

func cluster(nNodes, nSandboxes int, now time.Time) ([]store.Node, []*sandbox.Sandbox) {
	nodes := make([]store.Node, nNodes)
	for i := range nodes {
		nodes[i] = store.Node{ID: fmt.Sprintf("node-%03d", i), Runtimes: []string{"ns", "vm"}, State: store.NodeReady,
			LastHeartbeat: now, Capacity: store.Resources{CPUs: 64, MemoryMiB: 256 << 10}}
	}
	sbs := make([]*sandbox.Sandbox, nSandboxes)
	for i := range sbs {
		sb := sandbox.New("t-bench", sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, now)
		sb.Node, sb.State = nodes[i%nNodes].ID, sandbox.StateRunning
		sbs[i] = sb
	}
	return nodes, sbs
}

func clusterState(nNodes, nSandboxes int, now time.Time) State {
	nodes, sbs := cluster(nNodes, nSandboxes, now)
	return StateFrom(nodes, sbs, now)
}
