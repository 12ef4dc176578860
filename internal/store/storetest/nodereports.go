package storetest

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

func testNodeReports(t *testing.T, s store.Store) {
	r1 := store.NodeReport{Node: "node-a", SealedToken: "sealed-1", Executions: `[{"exec_id":"x"}]`, ReportedAt: at(2)}
	wantClass(t, "PutNodeReport unknown node", s.PutNodeReport(ctx(t), r1), errdefs.ErrNotFound)
	must(t, "PutNode", s.PutNode(ctx(t), store.Node{ID: "node-a", State: store.NodeReady, LastHeartbeat: at(2)}))
	_, err := s.GetNodeReport(ctx(t), "node-a")
	wantClass(t, "GetNodeReport before any", err, errdefs.ErrNotFound)
	list, err := s.ListNodeReports(ctx(t))
	must(t, "ListNodeReports empty", err)
	if list == nil || len(list) != 0 {
		t.Fatalf("ListNodeReports on no reports = %#v, want empty non-nil", list)
	}

	must(t, "PutNodeReport", s.PutNodeReport(ctx(t), r1))
	got, err := s.GetNodeReport(ctx(t), "node-a")
	must(t, "GetNodeReport", err)
	if got != r1 {
		t.Fatalf("GetNodeReport = %+v, want %+v", got, r1)
	}

	// A newer report replaces it; an older one, handled late, does not.
	r2 := store.NodeReport{Node: "node-a", SealedToken: "sealed-2", Executions: `[]`, ReportedAt: at(3)}
	must(t, "PutNodeReport newer", s.PutNodeReport(ctx(t), r2))
	must(t, "PutNodeReport older", s.PutNodeReport(ctx(t), r1))
	if got, _ := s.GetNodeReport(ctx(t), "node-a"); got != r2 {
		t.Fatalf("after a late older report: %+v, want the newer %+v", got, r2)
	}

	for _, bad := range []store.NodeReport{
		{SealedToken: "x", ReportedAt: at(4)},
		{Node: "node-a", SealedToken: "x"},
		{Node: "node-a", SealedToken: "x", Executions: strings.Repeat("e", store.MaxNodeReportBytes), ReportedAt: at(4)},
	} {
		wantClass(t, "PutNodeReport invalid", s.PutNodeReport(ctx(t), bad), errdefs.ErrInvalidArgument)
	}

	must(t, "PutNode b", s.PutNode(ctx(t), store.Node{ID: "node-b", State: store.NodeReady, LastHeartbeat: at(2)}))
	must(t, "PutNodeReport b", s.PutNodeReport(ctx(t), store.NodeReport{Node: "node-b", SealedToken: "s", Executions: "[]", ReportedAt: at(1)}))
	list, err = s.ListNodeReports(ctx(t))
	must(t, "ListNodeReports", err)
	if len(list) != 2 || list[0] != r2 || list[1].Node != "node-b" {
		t.Fatalf("ListNodeReports = %+v, want [node-a node-b]", list)
	}

	// A node's report goes with it.
	must(t, "DeleteNode", s.DeleteNode(ctx(t), "node-b"))
	_, err = s.GetNodeReport(ctx(t), "node-b")
	wantClass(t, "GetNodeReport of a deleted node", err, errdefs.ErrNotFound)
}

func testMarkNodeDown(t *testing.T, s store.Store) {
	must(t, "PutNode", s.PutNode(ctx(t), store.Node{ID: "node-a", State: store.NodeReady, LastHeartbeat: at(5)}))
	_, err := s.MarkNodeDown(ctx(t), "node-z", at(9))
	wantClass(t, "MarkNodeDown unknown", err, errdefs.ErrNotFound)

	// Heard from after silentSince: not lost.
	marked, err := s.MarkNodeDown(ctx(t), "node-a", at(5))
	must(t, "MarkNodeDown fresh", err)
	if marked {
		t.Fatal("MarkNodeDown marked a node heard from at silentSince")
	}
	if n, _ := s.GetNode(ctx(t), "node-a"); n.State != store.NodeReady {
		t.Fatalf("state %s after a refused MarkNodeDown, want ready", n.State)
	}

	// Replicas racing: exactly one marks it.
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := s.MarkNodeDown(ctx(t), "node-a", at(6))
			if err != nil {
				t.Errorf("MarkNodeDown: %v", err)
			}
			if ok {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d racing MarkNodeDown calls marked the node, want exactly 1", wins.Load())
	}
	n, err := s.GetNode(ctx(t), "node-a")
	must(t, "GetNode", err)
	if n.State != store.NodeDown || !n.LastHeartbeat.Equal(at(5)) {
		t.Fatalf("after MarkNodeDown: %+v, want down with its last heartbeat kept", n)
	}

	// A heartbeat puts it back; it can be lost again later.
	must(t, "PutNode again", s.PutNode(ctx(t), store.Node{ID: "node-a", State: store.NodeReady, LastHeartbeat: at(7)}))
	if marked, err := s.MarkNodeDown(ctx(t), "node-a", at(8).Add(time.Second)); err != nil || !marked {
		t.Fatalf("MarkNodeDown after it came back and went silent = %v, %v; want true", marked, err)
	}
}
