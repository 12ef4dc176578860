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

// BenchmarkPlaceAtScale: issue 9's scale, 1,000 nodes (simulated node
// records) and 100,000 sandboxes. "place" is one placement among them;
// "state+place" is what a create pays in all: building the snapshot from
// the store's records, then placing.
func BenchmarkPlaceAtScale(b *testing.B) {
	const nodes, sandboxes = 1000, 100000
	now := time.Now()
	nodeRecs, sbs := cluster(nodes, sandboxes, now)
	req := Request{Runtime: "ns", CPUs: 1, MemoryMiB: 256}
	b.Run("place", func(b *testing.B) {
		st := StateFrom(nodeRecs, sbs, now)
		for b.Loop() {
			if _, err := Place(req, st); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("state", func(b *testing.B) {
		for b.Loop() {
			StateFrom(nodeRecs, sbs, now)
		}
	})
	b.Run("state+place", func(b *testing.B) {
		for b.Loop() {
			if _, err := Place(req, StateFrom(nodeRecs, sbs, now)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestPlaceAtScale checks that the benchmark's cluster is what it claims:
// every node live with room, the sandboxes spread evenly, and a placement
// picks one of the least loaded nodes.
func TestPlaceAtScale(t *testing.T) {
	now := time.Now()
	nodeRecs, sbs := cluster(1000, 100000, now)
	st := StateFrom(nodeRecs, sbs, now)
	if len(st.Nodes) != 1000 {
		t.Fatalf("%d nodes, want 1000", len(st.Nodes))
	}
	for _, n := range st.Nodes {
		if !n.Live || n.Sandboxes != 100 || n.UsedMiB != 100*256 {
			t.Fatalf("node %s: %+v, want live with 100 sandboxes of 256 MiB", n.ID, n)
		}
	}
	plan, err := Place(Request{Runtime: "ns", CPUs: 1, MemoryMiB: 256}, st)
	if err != nil || plan.Node != "node-000" {
		t.Errorf("Place = %+v, %v; want node-000 (all equal, first id)", plan, err)
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
