package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

func testRecordHeartbeat(t *testing.T, s store.Store) {
	n := store.Node{
		ID: "node-a", Address: "tcp://10.0.0.1:7071",
		Capacity: store.Resources{CPUs: 2, MemoryMiB: 2048, DiskMiB: 10000},
		Runtimes: []string{"ns"}, State: store.NodeDown, // ignored
		RegisteredAt: at(1), LastHeartbeat: at(1),
	}
	heartbeat := func(what string, n store.Node, wantPrev, wantState store.NodeState) store.Node {
		t.Helper()
		prev, err := s.RecordHeartbeat(ctx(t), n)
		must(t, "RecordHeartbeat "+what, err)
		if prev != wantPrev {
			t.Errorf("RecordHeartbeat %s: previous = %q, want %q", what, prev, wantPrev)
		}
		got, err := s.GetNode(ctx(t), n.ID)
		must(t, "GetNode after RecordHeartbeat "+what, err)
		if got.State != wantState || got.Address != n.Address || got.Capacity != n.Capacity ||
			!equalStrings(got.Runtimes, n.Runtimes) || !got.LastHeartbeat.Equal(n.LastHeartbeat) ||
			!got.RegisteredAt.Equal(at(1)) {
			t.Errorf("after RecordHeartbeat %s: %+v; want state %s, the heartbeat's address, capacity, runtimes and time, RegisteredAt %v",
				what, got, wantState, at(1))
		}
		return got
	}

	heartbeat("of a new node", n, "", store.NodeReady)

	n.Address, n.Runtimes, n.LastHeartbeat, n.RegisteredAt = "tcp://10.0.0.2:7071", []string{"ns", "vm"}, at(2), at(2)
	n.State = store.NodeDraining // ignored too
	heartbeat("of a ready node", n, store.NodeReady, store.NodeReady)

	drained := n
	drained.State = store.NodeDraining
	must(t, "PutNode draining", s.PutNode(ctx(t), drained))
	n.Address, n.Capacity.CPUs, n.LastHeartbeat, n.State = "tcp://10.0.0.3:7071", 4, at(3), store.NodeReady
	heartbeat("of a draining node", n, store.NodeDraining, store.NodeDraining)

	if marked, err := s.MarkNodeDown(ctx(t), "node-a", at(4)); err != nil || !marked {
		t.Fatalf("MarkNodeDown = %v, %v; want true", marked, err)
	}
	n.LastHeartbeat = at(5)
	heartbeat("of a down node", n, store.NodeDown, store.NodeReady)

	for _, bad := range []store.Node{{}, {ID: "node-b", Runtimes: []string{"n,s"}}, {ID: "node-b", Runtimes: []string{""}}} {
		_, err := s.RecordHeartbeat(ctx(t), bad)
		wantClass(t, fmt.Sprintf("RecordHeartbeat %+v", bad), err, errdefs.ErrInvalidArgument)
	}
}

// testRecordHeartbeatDrainRace races a drain against heartbeats that
// re-register the node with a new address: whatever the order, the drain is
// never lost, and a heartbeat that starts after the drain returned sees it.
func testRecordHeartbeatDrainRace(t *testing.T, s store.Store) {
	const beaters, beats = 4, 10
	base := store.Node{ID: "node-a", Address: "tcp://10.0.0.1:7071", Runtimes: []string{"ns"}, LastHeartbeat: at(1)}
	if _, err := s.RecordHeartbeat(ctx(t), base); err != nil {
		t.Fatalf("RecordHeartbeat: %v", err)
	}
	var drained atomic.Bool
	start := make(chan struct{})
	var wg sync.WaitGroup
	for b := range beaters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range beats {
				n := base
				n.Address = fmt.Sprintf("tcp://10.0.%d.%d:7071", b, i)
				n.LastHeartbeat = at(2 + i)
				after := drained.Load()
				prev, err := s.RecordHeartbeat(ctx(t), n)
				if err != nil {
					t.Errorf("RecordHeartbeat: %v", err)
					return
				}
				if after && prev != store.NodeDraining {
					t.Errorf("a heartbeat that started after the drain returned saw %q, want draining", prev)
				}
			}
		}()
	}
	close(start)
	drain := base
	drain.State, drain.LastHeartbeat = store.NodeDraining, at(1)
	err := s.PutNode(ctx(t), drain)
	drained.Store(true)
	must(t, "PutNode draining", err)
	wg.Wait()

	got, err := s.GetNode(ctx(t), "node-a")
	must(t, "GetNode", err)
	if got.State != store.NodeDraining {
		t.Fatalf("after a drain raced %d heartbeats: state %s, want draining (the drain was lost)", beaters*beats, got.State)
	}
}
