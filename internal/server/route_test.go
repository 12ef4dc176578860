package server

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/restapi"
	"github.com/spacesandbox/space/internal/route"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// fakeNode is a receiver that checks capabilities like a node: it installed
// generation `installed` of the sandbox and answers RefreshRoute to others.
type fakeNode struct {
	keys      *capability.KeySet
	installed atomic.Uint64
	node      string
	calls     atomic.Int64
}

func (f *fakeNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	tok, err := capability.Decode(r.Header.Get(capability.Header))
	var c *capability.Capability
	if err == nil {
		c, err = capability.Verify(tok, f.keys, time.Now())
	}
	if err != nil {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	installed := capability.Identity{Sandbox: c.Sandbox, Generation: f.installed.Load(), Node: f.node, Substrate: "ns", Activation: c.Activation}
	switch d, why := capability.Compare(c, installed, capability.Request{Op: c.Ops}); d {
	case capability.Allow:
		b, _ := proto.Marshal(&filesystemv1.ListDirResponse{Entries: []*filesystemv1.EntryInfo{{Name: "gen-ok"}}})
		w.Header().Set("Content-Type", "application/proto")
		w.Write(b)
	case capability.RefreshRoute:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		json.NewEncoder(w).Encode(map[string]string{"code": "refresh_route", "message": why})
	default:
		w.WriteHeader(http.StatusForbidden)
	}
}

// TestRouteRepair: a node answers RefreshRoute to a request on generation 7
// once the sandbox runs as generation 8: the transport repairs the route
// once and retries a read against 8; a process start is not replayed; a late
// rejection of 7 does not evict the newer route; a repaired route keeps the
// rejected one's expiry.
func TestRouteRepair(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := capability.NewSigner("k1", priv)
	keys := capability.KeySetFor(1, signer)

	fake := &fakeNode{keys: keys, node: "node-a"}
	fake.installed.Store(8)
	srvNode := httptest.NewServer(fake)
	defer srvNode.Close()
	nodes := NewNodes()
	if err := nodes.Register("node-a", strings.TrimPrefix(srvNode.URL, "http://"), "tok"); err != nil {
		t.Fatal(err)
	}
	s := New(Config{Signer: signer, Keys: keys}, st, nodes, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))

	if _, err := Bootstrap(ctx, st, filepath.Join(t.TempDir(), "admin.key")); err != nil {
		t.Fatal(err)
	}
	tenants, _ := st.ListTenants(ctx)
	sb := sandbox.New(tenants[0].ID, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, time.Now())
	sb.State, sb.Node, sb.Generation = sandbox.StateRunning, "node-a", 8
	sb.ExecID = sandbox.NewExecID(sb.ID, 8)
	if err := st.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	old := *sb
	old.Generation, old.ExecID = 7, sandbox.NewExecID(sb.ID, 7)
	r7, err := s.mintRoute(&old, capability.OpFiles, time.Time{})
	if err != nil {
		t.Fatal(err)
	}

	// conn is a guest connection whose route (and the cache's) is rt, as
	// when rt was current at the time it was made.
	conn := func(rt *route.Route) *restapi.Guest {
		g, err := s.guestFor(ctx, sb, capability.OpFiles)
		if err != nil {
			t.Fatal(err)
		}
		s.routes.Put(rt)
		g.HTTP.Transport.(*routeTransport).route.Store(rt)
		return g
	}

	// A read on generation 7 is refused, repaired once, and retried on 8.
	g := conn(r7)
	resp, err := g.Files.ListDir(ctx, connect.NewRequest(&filesystemv1.ListDirRequest{Path: "/"}))
	if err != nil {
		t.Fatalf("ListDir after RefreshRoute: %v", err)
	}
	if len(resp.Msg.GetEntries()) != 1 || resp.Msg.GetEntries()[0].GetName() != "gen-ok" {
		t.Errorf("ListDir answer %v", resp.Msg)
	}
	cur := s.routes.Get(sb.ID, capability.OpFiles, time.Now())
	if cur == nil || cur.Identity.Generation != 8 || !cur.Repaired || !cur.Expires.Equal(r7.Expires) {
		t.Fatalf("cache after repair: %+v; want generation 8 with the rejected route's expiry %v", cur, r7.Expires)
	}

	// A late rejection of generation 7 leaves the repaired route in place.
	if got := s.routes.Repair(r7, r7, time.Now()); got != cur {
		t.Errorf("late repair returned %+v, want the current route", got)
	}
	if s.routes.Get(sb.ID, capability.OpFiles, time.Now()) != cur {
		t.Error("a late rejection evicted the newer route")
	}

	// A process start on generation 7 is not replayed: the caller gets the
	// refusal, and the connection's next request uses the repaired route.
	r7exec, _ := s.mintRoute(&old, capability.OpExec, time.Time{})
	gx, err := s.guestFor(ctx, sb, capability.OpExec)
	if err != nil {
		t.Fatal(err)
	}
	s.routes.Put(r7exec)
	tr := gx.HTTP.Transport.(*routeTransport)
	tr.route.Store(r7exec)
	before := fake.calls.Load()
	stream, err := gx.Process.Start(ctx, connect.NewRequest(&processv1.StartRequest{Process: &processv1.ProcessConfig{Cmd: "true"}}))
	if err == nil {
		stream.Receive()
		err = stream.Err()
		stream.Close()
	}
	if err == nil {
		t.Error("a process start on a stale route succeeded; it must not be replayed")
	} else if status, code := statusOf(restapi.GuestError("start", err)); status != http.StatusServiceUnavailable || code != "refresh_route" {
		t.Errorf("the refused start answers HTTP %d %q (%v), want 503 refresh_route so clients know a retry is safe", status, code, err)
	}
	if n := fake.calls.Load() - before; n != 1 {
		t.Errorf("the node saw %d requests for one start, want 1 (no replay)", n)
	}
	if tr.route.Load().Identity.Generation != 8 {
		t.Errorf("after the refused start the connection routes to generation %d, want 8", tr.route.Load().Identity.Generation)
	}

	// When the store still names generation 7 there is nothing to repair
	// to: the refusal is returned, not retried in a loop.
	fake.installed.Store(9)
	before = fake.calls.Load()
	g = conn(cur)
	if _, err := g.Files.ListDir(ctx, connect.NewRequest(&filesystemv1.ListDirRequest{Path: "/"})); err == nil {
		t.Error("ListDir succeeded against a node that installed a generation the store does not know")
	}
	if n := fake.calls.Load() - before; n != 1 {
		t.Errorf("the node saw %d requests, want 1 (a repaired route is not repaired again)", n)
	}
}

// TestGuestsShareClientsNotRoutes: guests made for two sandboxes share the
// Connect clients but each call goes through its own guest's route: a node
// that installed only the second sandbox's execution refuses the first's
// calls and answers the second's, however the calls interleave.
func TestGuestsShareClientsNotRoutes(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := capability.NewSigner("k1", priv)
	keys := capability.KeySetFor(1, signer)
	fake := &fakeNode{keys: keys, node: "node-a"}
	fake.installed.Store(5)
	srvNode := httptest.NewServer(fake)
	defer srvNode.Close()
	nodes := NewNodes()
	if err := nodes.Register("node-a", strings.TrimPrefix(srvNode.URL, "http://"), "tok"); err != nil {
		t.Fatal(err)
	}
	s := New(Config{Signer: signer, Keys: keys}, st, nodes, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := Bootstrap(ctx, st, filepath.Join(t.TempDir(), "admin.key")); err != nil {
		t.Fatal(err)
	}
	tenants, _ := st.ListTenants(ctx)
	guestOf := func(gen uint64) *restapi.Guest {
		sb := sandbox.New(tenants[0].ID, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, time.Now())
		sb.State, sb.Node, sb.Generation = sandbox.StateRunning, "node-a", gen
		sb.ExecID = sandbox.NewExecID(sb.ID, gen)
		if err := st.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		g, err := s.guestFor(ctx, sb, capability.OpFiles)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	// The fake compares generations only: generation 4 is refused
	// (RefreshRoute, and the store names 4 still, so no repair), 5 served.
	refused, served := guestOf(4), guestOf(5)
	for i := range 3 {
		if _, err := served.Files.ListDir(ctx, connect.NewRequest(&filesystemv1.ListDirRequest{Path: "/"})); err != nil {
			t.Errorf("call %d on the served sandbox's guest: %v", i, err)
		}
		if _, err := refused.Files.ListDir(ctx, connect.NewRequest(&filesystemv1.ListDirRequest{Path: "/"})); err == nil {
			t.Errorf("call %d on the other sandbox's guest succeeded: it went out on the served one's route", i)
		}
	}
	if _, err := sharedFiles.ListDir(ctx, connect.NewRequest(&filesystemv1.ListDirRequest{Path: "/"})); err == nil {
		t.Error("a call on the shared client without a guest's route succeeded")
	}
}

// BenchmarkGuestFor: what a guest request pays to get its Guest (route
// cached).
func BenchmarkGuestFor(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := capability.NewSigner("k1", priv)
	s := New(Config{Signer: signer, Keys: capability.KeySetFor(1, signer)}, st, NewNodes(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	sb := sandbox.New("t", sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, time.Now())
	sb.State, sb.Node, sb.Generation = sandbox.StateRunning, "node-a", 1
	sb.ExecID = sandbox.NewExecID(sb.ID, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.guestFor(ctx, sb, capability.OpExec); err != nil {
			b.Fatal(err)
		}
	}
}
