package server

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// readCountingStore counts the sandbox reads made through it.
type readCountingStore struct {
	store.Store
	byID, lists atomic.Int64
}

func (c *readCountingStore) GetSandboxByID(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	c.byID.Add(1)
	return c.Store.GetSandboxByID(ctx, id)
}

func (c *readCountingStore) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*sandbox.Sandbox, error) {
	c.lists.Add(1)
	return c.Store.ListSandboxes(ctx, f)
}

// TestHeartbeatRetirementsReadTheStoreOnce: a heartbeat reporting n
// executions whose sandboxes are still on the node reads the store the same
// number of times whatever n (one list of the node's sandboxes, no read per
// execution); a sandbox that moved to another node or is gone is read by id
// and its execution retired, the current ones are not.
func TestHeartbeatRetirementsReadTheStoreOnce(t *testing.T) {
	t.Parallel()
	reads := map[int]int64{}
	for _, n := range []int{3, 60} {
		st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "space.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		cs := &readCountingStore{Store: st}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		nodes := NewNodes()
		rec := reconcile.New(reconcile.Config{}, cs, func(id string) (reconcile.NodeAPI, error) { return nodes.Client(id) }, log)
		srv := New(Config{JoinToken: testJoinToken}, cs, nodes, rec, log)
		api := httptest.NewServer(srv.Handler())
		t.Cleanup(api.Close)
		ctx := t.Context()
		tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "acme", CreatedAt: time.Now().UTC()}
		if err := st.CreateTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
		mk := func(node string) (*sandbox.Sandbox, nodev1.Execution) {
			sb := sandbox.New(tn.ID, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 64}, time.Now())
			sb.State, sb.Desired, sb.Node = sandbox.StateRunning, sandbox.StateRunning, "n1"
			ex := nodev1.Execution{ExecID: sb.ExecID, SandboxID: sb.ID, Generation: sb.Generation, State: nodev1.ExecRunning}
			if node != "n1" {
				if err := sb.Apply(sandbox.OpRecover); err != nil {
					t.Fatal(err)
				}
				sb.Node = node
			}
			if err := st.CreateSandbox(ctx, sb); err != nil {
				t.Fatal(err)
			}
			return sb, ex
		}
		var execs []nodev1.Execution
		for range n {
			_, ex := mk("n1")
			execs = append(execs, ex)
		}
		moved, movedEx := mk("n2")
		gone := nodev1.Execution{ExecID: "gonegonegonegonegone-g1-aaaaaaaa", SandboxID: "gonegonegonegonegone", Generation: 1, State: nodev1.ExecRunning}
		execs = append(execs, movedEx, gone)
		beat := func() map[string]nodev1.Retirement {
			reply, err := heartbeatVia(ctx, nil, api.URL, "n1", testHeartbeat{Address: "127.0.0.1:1", Token: "tok", Runtimes: []string{"ns"}, CPUs: 4, MemoryMiB: 4096, Executions: execs})
			if err != nil {
				t.Fatalf("heartbeat: %v", err)
			}
			got := map[string]nodev1.Retirement{}
			for _, r := range nodev1.RetirementsFromWire(reply.GetRetire()) {
				got[r.ExecID] = r
			}
			return got
		}
		beat() // registers the node
		b0, l0 := cs.byID.Load(), cs.lists.Load()
		got := beat()
		byID, lists := cs.byID.Load()-b0, cs.lists.Load()-l0
		if r, ok := got[movedEx.ExecID]; !ok || r.Generation != moved.Generation {
			t.Errorf("n=%d: moved sandbox's old execution: retirement %+v (found %v), want generation %d", n, r, ok, moved.Generation)
		}
		if _, ok := got[gone.ExecID]; !ok {
			t.Errorf("n=%d: the execution of a gone sandbox was not retired", n)
		}
		if len(got) != 2 {
			t.Errorf("n=%d: retired %d executions, want the 2 old ones", n, len(got))
		}
		if byID > 2 {
			t.Errorf("n=%d: a heartbeat read %d sandboxes by id, want at most 2 (the moved and the gone one)", n, byID)
		}
		reads[n] = byID + lists
	}
	if reads[60] != reads[3] {
		t.Errorf("sandbox reads per heartbeat: %d with 3 executions on the node, %d with 60; want the same", reads[3], reads[60])
	}
}
