package scheduler

import (
	"errors"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

func TestPlace(t *testing.T) {
	node := func(id string, live bool, capMiB, usedMiB int, rt ...string) NodeState {
		return NodeState{ID: id, Live: live, Runtimes: rt, CapacityCPUs: 2, CapacityMiB: capMiB, UsedMiB: usedMiB}
	}
	tests := []struct {
		name     string
		req      Request
		nodes    []NodeState
		want     string
		wantFail bool
	}{
		{"no nodes", Request{"ns", 1, 512}, nil, "", true},
		{"one fits", Request{"ns", 1, 512}, []NodeState{node("a", true, 1024, 0, "ns")}, "a", false},
		{"dead node skipped", Request{"ns", 1, 512}, []NodeState{node("a", false, 8192, 0, "ns"), node("b", true, 1024, 0, "ns")}, "b", false},
		{"runtime missing", Request{"vm", 1, 512}, []NodeState{node("a", true, 8192, 0, "ns")}, "", true},
		{"memory full", Request{"ns", 1, 512}, []NodeState{node("a", true, 1024, 768, "ns")}, "", true},
		{"most free wins", Request{"ns", 1, 512}, []NodeState{node("a", true, 4096, 3000, "ns"), node("b", true, 4096, 1000, "ns")}, "b", false},
		{"tie by id", Request{"ns", 1, 512}, []NodeState{node("b", true, 4096, 0, "ns"), node("a", true, 4096, 0, "ns")}, "a", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Place(tt.req, State{Nodes: tt.nodes})
			if tt.wantFail {
				if !errors.Is(err, errdefs.ErrResourceExhausted) {
					t.Fatalf("Place = %+v, %v; want ResourceExhausted", plan, err)
				}
				return
			}
			if err != nil || plan.Node != tt.want {
				t.Fatalf("Place = %+v, %v; want node %s", plan, err, tt.want)
			}
			if plan.Reason == "" {
				t.Error("plan has no reason")
			}
		})
	}
}

func TestStateFromCountsOnlyHoldingSandboxes(t *testing.T) {
	now := time.Now()
	nodes := []store.Node{
		{ID: "a", State: store.NodeReady, LastHeartbeat: now, Capacity: store.Resources{CPUs: 2, MemoryMiB: 4096}, Runtimes: []string{"ns"}},
		{ID: "b", State: store.NodeReady, LastHeartbeat: now.Add(-time.Hour), Capacity: store.Resources{CPUs: 2, MemoryMiB: 4096}},
	}
	sbs := []*sandbox.Sandbox{
		{Node: "a", State: sandbox.StateRunning, MemoryMiB: 512, CPUs: 1},
		{Node: "a", State: sandbox.StateFailed, MemoryMiB: 1024, CPUs: 1},
	}
	st := StateFrom(nodes, sbs, now)
	if got := st.Nodes[0].UsedMiB; got != 512 {
		t.Errorf("used on a = %d MiB, want 512", got)
	}
	if st.Nodes[1].Live {
		t.Error("node b with an hour-old heartbeat is live")
	}
}
