package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/api/node/v1/nodeapi/nodeapiv1connect"
	"github.com/spacesandbox/space/internal/connecterr"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/nodeclient"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// tokenNode is a node API that lists no executions to callers presenting
// its token and refuses the others, recording the tokens it saw.
type tokenNode struct {
	token string

	mu   sync.Mutex // guards seen
	seen []string
}

func (n *tokenNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(nodev1.VersionHeader, nodev1.Version)
	got := r.Header.Get(nodeclient.TokenHeader)
	n.mu.Lock()
	n.seen = append(n.seen, got)
	n.mu.Unlock()
	n.mu.Lock()
	want := n.token
	n.mu.Unlock()
	if got != want {
		_ = connect.NewErrorWriter().Write(w, r, connecterr.Encode(fmt.Errorf("%w: bad node token", errdefs.ErrUnauthenticated)))
		return
	}
	_, h := nodeapiv1connect.NewExecutionServiceHandler(listNoExecutions{})
	h.ServeHTTP(w, r)
}

// listNoExecutions is a node's ExecutionService that lists none.
type listNoExecutions struct {
	nodeapiv1connect.UnimplementedExecutionServiceHandler
}

func (listNoExecutions) List(context.Context, *connect.Request[nodeapiv1.ListExecutionsRequest]) (*connect.Response[nodeapiv1.ListExecutionsResponse], error) {
	return connect.NewResponse(&nodeapiv1.ListExecutionsResponse{}), nil
}

// replicaPair is two control-plane replicas over one store, sharing a
// sealing key, each with its own node registry.
type replicaPair struct {
	st     store.Store
	a, b   *Server
	aURL   string
	sealer *CASealer
}

func newReplicaPair(t *testing.T) *replicaPair {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sealer, err := OpenCASealer(filepath.Join(t.TempDir(), "ca-seal.key"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := &replicaPair{st: st, sealer: sealer}
	for _, s := range []**Server{&p.a, &p.b} {
		nodes := NewNodes()
		nodes.Share(st, sealer)
		rec := reconcile.New(reconcile.Config{}, st, func(id string) (reconcile.NodeAPI, error) { return nodes.Client(id) }, log)
		*s = New(Config{JoinToken: testJoinToken, CASealer: sealer}, st, nodes, rec, log)
	}
	api := httptest.NewServer(p.a.Handler())
	t.Cleanup(api.Close)
	p.aURL = api.URL
	return p
}

// heartbeat sends node id's heartbeat to replica a and returns its answer.
func (p *replicaPair) heartbeat(t *testing.T, id, addr, token string, execs ...nodev1.Execution) *nodeapiv1.HeartbeatReply {
	t.Helper()
	reply, err := heartbeatVia(t.Context(), nil, p.aURL, id, testHeartbeat{Address: addr, Token: token, Runtimes: []string{"ns"}, CPUs: 4, MemoryMiB: 4096, Executions: execs})
	if err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	return reply
}

func TestAReplicaReachesANodeThatReportsToAnother(t *testing.T) {
	t.Parallel()
	p := newReplicaPair(t)
	node := &tokenNode{token: "node-secret-token-0123456789"}
	nodeSrv := httptest.NewServer(node)
	t.Cleanup(nodeSrv.Close)
	addr := strings.TrimPrefix(nodeSrv.URL, "http://")

	// Before any heartbeat replica b cannot know the node.
	if _, err := p.b.nodes.Client("n1"); !errdefs.IsUnavailable(err) {
		t.Fatalf("client of an unknown node: err = %v, want unavailable", err)
	}
	p.heartbeat(t, "n1", addr, node.token)

	c, err := p.b.nodes.Client("n1")
	if err != nil {
		t.Fatalf("replica b: client of a node that reported to a: %v", err)
	}
	if _, err := c.List(t.Context()); err != nil {
		t.Fatalf("replica b calling the node: %v", err)
	}
	node.mu.Lock()
	seen := append([]string(nil), node.seen...)
	node.mu.Unlock()
	if len(seen) != 1 || seen[0] != node.token {
		t.Fatalf("the node saw tokens %q, want its own once", seen)
	}

	// The store holds the token sealed, never in the clear.
	rep, err := p.st.GetNodeReport(t.Context(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rep.SealedToken, node.token) || rep.SealedToken == "" {
		t.Fatalf("stored token %q is not sealed", rep.SealedToken)
	}
	// A replica with another key cannot open it; nor can a node id the
	// token was not sealed for.
	other, err := OpenCASealer(filepath.Join(t.TempDir(), "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.openNodeToken("n1", rep.SealedToken); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("open with another key: err = %v, want failed precondition", err)
	}
	if _, err := p.sealer.openNodeToken("n2", rep.SealedToken); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("open for another node: err = %v, want failed precondition", err)
	}
	stranger := NewNodes()
	stranger.Share(p.st, other)
	if _, err := stranger.Client("n1"); err == nil {
		t.Fatal("a replica without the shared key got a client")
	}
}

func TestANodeReportsExecutionsForEveryReplica(t *testing.T) {
	t.Parallel()
	p := newReplicaPair(t)
	ex := nodev1.Execution{ExecID: "aaaaaaaaaaaaaaaaaaaa-g1-bbbbbbbb", SandboxID: "aaaaaaaaaaaaaaaaaaaa", Generation: 1, State: nodev1.ExecRunning}
	before := time.Now().UTC()
	p.heartbeat(t, "n1", "127.0.0.1:1", "tok", ex)
	rep, err := p.st.GetNodeReport(t.Context(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	var execs []nodev1.Execution
	if err := json.Unmarshal([]byte(rep.Executions), &execs); err != nil {
		t.Fatal(err)
	}
	if len(execs) != 1 || execs[0].ExecID != ex.ExecID || rep.ReportedAt.Before(before.Add(-time.Second)) {
		t.Fatalf("stored report %+v (executions %+v), want the heartbeat's", rep, execs)
	}
}

// TestANodeBackFromTheDeadCannotServeItsOldExecutions: a node declared lost
// whose sandboxes were recovered elsewhere (generation+1) or failed comes
// back and reports its old executions; the heartbeat's answer retires them,
// so their capabilities stop working on the node.
func TestANodeBackFromTheDeadCannotServeItsOldExecutions(t *testing.T) {
	t.Parallel()
	p := newReplicaPair(t)
	ctx := t.Context()
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "acme", CreatedAt: time.Now().UTC()}
	if err := p.st.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	mk := func(state sandbox.State, node string) (*sandbox.Sandbox, nodev1.Execution) {
		sb := sandbox.New(tn.ID, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, time.Now())
		sb.State, sb.Desired, sb.Node = sandbox.StateRunning, sandbox.StateRunning, "n1"
		old := nodev1.Execution{ExecID: sb.ExecID, SandboxID: sb.ID, Generation: sb.Generation, State: nodev1.ExecRunning}
		switch state {
		case sandbox.StateRecovering:
			if err := sb.Apply(sandbox.OpRecover); err != nil {
				t.Fatal(err)
			}
			sb.Node = node
		case sandbox.StateFailed:
			if err := sb.Fail("node n1 lost; no snapshot in object storage"); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.st.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		return sb, old
	}
	moved, movedOld := mk(sandbox.StateRecovering, "n2")
	failed, failedOld := mk(sandbox.StateFailed, "")
	kept, keptEx := mk(sandbox.StateRunning, "")

	reply := p.heartbeat(t, "n1", "127.0.0.1:1", "tok", movedOld, failedOld, keptEx)
	got := map[string]nodev1.Retirement{}
	for _, r := range nodev1.RetirementsFromWire(reply.GetRetire()) {
		got[r.ExecID] = r
	}
	if r, ok := got[movedOld.ExecID]; !ok || r.Generation != moved.Generation || r.SandboxID != moved.ID {
		t.Errorf("recovered sandbox's old execution: retirement %+v (found %v), want generation %d", r, ok, moved.Generation)
	}
	if _, ok := got[failedOld.ExecID]; !ok {
		t.Errorf("failed sandbox's execution %s was not retired (retired %v)", failed.ExecID, reply.Retire)
	}
	if _, ok := got[keptEx.ExecID]; ok {
		t.Errorf("the current execution of running sandbox %s was retired", kept.ID)
	}
	if len(got) != 2 {
		t.Errorf("retired %v, want exactly the two old executions", reply.Retire)
	}
}

func FuzzOpenNodeToken(f *testing.F) {
	sealer, err := NewCASealer(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("n1", sealer.sealNodeToken("n1", "tok"))
	f.Add("n1", "")
	f.Add("n1", "AQ==")
	f.Add("n1", "!!not base64")
	f.Fuzz(func(t *testing.T, node, sealed string) {
		tok, err := sealer.openNodeToken(node, sealed)
		if err != nil {
			if !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("error %v is not a failed precondition", err)
			}
			return
		}
		if again, err := sealer.openNodeToken(node, sealer.sealNodeToken(node, tok)); err != nil || again != tok {
			t.Fatalf("re-seal round trip = %q, %v; want %q", again, err, tok)
		}
	})
}

func TestAReplicaFollowsANodeThatRestartedWithANewToken(t *testing.T) {
	t.Parallel()
	p := newReplicaPair(t)
	node := &tokenNode{token: "first-token-0123456789"}
	nodeSrv := httptest.NewServer(node)
	t.Cleanup(nodeSrv.Close)
	addr := strings.TrimPrefix(nodeSrv.URL, "http://")
	p.heartbeat(t, "n1", addr, node.token)
	c, err := p.b.nodes.Client("n1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.List(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The node restarts with a new token and reports to replica a only.
	node.mu.Lock()
	node.token = "second-token-0123456789"
	node.mu.Unlock()
	p.heartbeat(t, "n1", addr, "second-token-0123456789")
	deadline := time.Now().Add(sharedClientTTL + 5*time.Second)
	for {
		c, err := p.b.nodes.Client("n1")
		if err == nil {
			if _, err = c.List(t.Context()); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica b still cannot call the node %s after its new token was reported: %v", time.Since(deadline.Add(-sharedClientTTL-5*time.Second)), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
