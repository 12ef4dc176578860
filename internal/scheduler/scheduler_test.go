package scheduler

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
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
		{"no nodes", Request{Runtime: "ns", CPUs: 1, MemoryMiB: 512}, nil, "", true},
		{"one fits", Request{Runtime: "ns", CPUs: 1, MemoryMiB: 512}, []NodeState{node("a", true, 1024, 0, "ns")}, "a", false},
		{"dead node skipped", Request{Runtime: "ns", CPUs: 1, MemoryMiB: 512}, []NodeState{node("a", false, 8192, 0, "ns"), node("b", true, 1024, 0, "ns")}, "b", false},
		{"runtime missing", Request{Runtime: "vm", CPUs: 1, MemoryMiB: 512}, []NodeState{node("a", true, 8192, 0, "ns")}, "", true},
		{"memory full", Request{Runtime: "ns", CPUs: 1, MemoryMiB: 512}, []NodeState{node("a", true, 1024, 768, "ns")}, "", true},
		{"most free wins", Request{Runtime: "ns", CPUs: 1, MemoryMiB: 512}, []NodeState{node("a", true, 4096, 3000, "ns"), node("b", true, 4096, 1000, "ns")}, "b", false},
		{"tie by id", Request{Runtime: "ns", CPUs: 1, MemoryMiB: 512}, []NodeState{node("b", true, 4096, 0, "ns"), node("a", true, 4096, 0, "ns")}, "a", false},
		// A template that exists on one node alone: the fuller node that
		// holds it, never the free one that lacks it.
		{"only the template's node", Request{Runtime: "ns", CPUs: 1, MemoryMiB: 512, Only: []string{"a"}, OnlyWhy: "holds template t"}, []NodeState{node("a", true, 4096, 3000, "ns"), node("b", true, 4096, 0, "ns")}, "a", false},
		{"the template's node full", Request{Runtime: "ns", CPUs: 1, MemoryMiB: 512, Only: []string{"a"}, OnlyWhy: "holds template t"}, []NodeState{node("a", true, 1024, 768, "ns"), node("b", true, 4096, 0, "ns")}, "", true},
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

func TestPlaceExplainsQuota(t *testing.T) {
	st := State{Nodes: []NodeState{{ID: "a", Live: true, Runtimes: []string{"ns"}, CapacityCPUs: 2, CapacityMiB: 4096}}}
	plan, err := Place(Request{Runtime: "ns", CPUs: 1, MemoryMiB: 512}, st)
	if err != nil || strings.Contains(plan.Reason, "quota") {
		t.Fatalf("Place without quota = %+v, %v; want a reason without quota", plan, err)
	}
	tq := &TenantQuota{ID: "t-1", Quota: store.Quota{MaxSandboxes: 2}, Usage: store.Usage{Sandboxes: 1, MemoryMiB: 512, CPUs: 1}}
	plan, err = Place(Request{Runtime: "ns", CPUs: 1, MemoryMiB: 512, Tenant: tq}, st)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tenant t-1", "1 sandboxes, 512 MiB, 1 CPUs", "quota 2 sandboxes"} {
		if !strings.Contains(plan.Reason, want) {
			t.Errorf("reason %q does not say %q", plan.Reason, want)
		}
	}
}

func TestPlaceOvercommit(t *testing.T) {
	node := func(usedMiB, availMiB int, pressure string) NodeState {
		return NodeState{ID: "a", Live: true, Runtimes: []string{"ns"}, CapacityCPUs: 2, CapacityMiB: 1024, UsedMiB: usedMiB, AvailableMiB: availMiB, Pressure: pressure}
	}
	req := Request{Runtime: "ns", CPUs: 1, MemoryMiB: 512}
	tests := []struct {
		name    string
		oc      Overcommit
		n       NodeState
		wantWhy string // empty: admitted
	}{
		{"no overcommit refuses beyond the sum", Overcommit{}, node(1024, 900, ""), "1024 MiB committed of 1024 allowed"},
		{"ratio admits beyond the sum", Overcommit{Ratio: 4, ReserveMiB: 128}, node(1024, 900, ""), ""},
		{"ratio bounds the committed sum", Overcommit{Ratio: 2, ReserveMiB: 128}, node(1800, 900, ""), "1800 MiB committed of 2048 allowed"},
		{"real use leaves no reserve", Overcommit{Ratio: 4, ReserveMiB: 128}, node(1024, 600, ""), "600 MiB really free"},
		{"unreported use: the sum alone admits", Overcommit{Ratio: 4, ReserveMiB: 128}, node(1024, -1, ""), ""},
		{"pressure refuses with its reason", Overcommit{Ratio: 4}, node(0, 900, "psi some avg10=35.00"), "memory pressure (psi some avg10=35.00)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Place(req, State{Nodes: []NodeState{tt.n}, Overcommit: tt.oc})
			if tt.wantWhy == "" {
				if err != nil || plan.Node != "a" {
					t.Fatalf("Place = %+v, %v; want node a", plan, err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), tt.wantWhy) {
				t.Fatalf("Place = %+v, %v; want ResourceExhausted saying %q", plan, err, tt.wantWhy)
			}
		})
	}
}

// TestPlaceCPUOvercommit: the CPUs a node's sandboxes may sum to are its
// CPUs times Overcommit.CPURatio, DefaultCPUOvercommit when unset (a 2-CPU
// node refused the 129th one-CPU sandbox of a density run).
func TestPlaceCPUOvercommit(t *testing.T) {
	node := func(usedCPUs int) NodeState {
		return NodeState{ID: "a", Live: true, Runtimes: []string{"ns"}, CapacityCPUs: 2, CapacityMiB: 1 << 20, UsedCPUs: usedCPUs, AvailableMiB: -1}
	}
	req := Request{Runtime: "ns", CPUs: 1, MemoryMiB: 64}
	tests := []struct {
		name    string
		oc      Overcommit
		n       NodeState
		wantWhy string // empty: admitted
	}{
		{"default admits the 128th", Overcommit{}, node(127), ""},
		{"default refuses the 129th", Overcommit{}, node(128), "128 CPUs committed of 128 allowed (2 CPUs × 64, --cpu-overcommit), 1 needed"},
		{"ratio admits the 1000th", Overcommit{CPURatio: 564}, node(999), ""},
		{"ratio bounds the sum", Overcommit{CPURatio: 564}, node(1128), "1128 CPUs committed of 1128 allowed (2 CPUs × 564"},
		{"ratio 1: no sharing", Overcommit{CPURatio: 1}, node(2), "2 CPUs committed of 2 allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := Place(req, State{Nodes: []NodeState{tt.n}, Overcommit: tt.oc})
			if tt.wantWhy == "" {
				if err != nil || plan.Node != "a" {
					t.Fatalf("Place = %+v, %v; want node a", plan, err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), tt.wantWhy) {
				t.Fatalf("Place = %+v, %v; want ResourceExhausted saying %q", plan, err, tt.wantWhy)
			}
		})
	}
}

// TestStateFromUsageAgreesWithStateFrom: the state built from the store's
// per-node aggregate is the one built from every sandbox's row.
func TestStateFromUsageAgreesWithStateFrom(t *testing.T) {
	now := time.Now()
	nodes := []store.Node{
		{ID: "n1", State: store.NodeReady, LastHeartbeat: now, Runtimes: []string{"ns"}, Capacity: store.Resources{CPUs: 4, MemoryMiB: 4096}},
		{ID: "n2", State: store.NodeReady, LastHeartbeat: now, Runtimes: []string{"ns"}, Capacity: store.Resources{CPUs: 2, MemoryMiB: 2048}},
		{ID: "n3", State: store.NodeDown, LastHeartbeat: now.Add(-time.Hour), Runtimes: []string{"ns"}, Capacity: store.Resources{CPUs: 2, MemoryMiB: 2048}},
	}
	var sbs []*sandbox.Sandbox
	usage := map[string]store.Usage{}
	for i, st := range sandbox.States {
		sb := &sandbox.Sandbox{ID: fmt.Sprint("sb", i), State: st, Node: []string{"n1", "n2", "elsewhere"}[i%3], CPUs: 1 + i%2, MemoryMiB: 256 * (1 + i%4)}
		sbs = append(sbs, sb)
		if store.HoldsResources(st) {
			u := usage[sb.Node]
			u.Sandboxes++
			u.CPUs += sb.CPUs
			u.MemoryMiB += sb.MemoryMiB
			usage[sb.Node] = u
		}
	}
	if got, want := StateFromUsage(nodes, usage, now), StateFrom(nodes, sbs, now); !reflect.DeepEqual(got, want) {
		t.Errorf("StateFromUsage = %+v\nStateFrom = %+v", got, want)
	}
}
