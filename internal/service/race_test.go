package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore/filestore"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"pgregory.net/rapid"
)

// raceEnv is two control-plane replicas over one SQLite store that
// announces sandbox changes as PostgreSQL does: each has its own
// operations (Sandboxes) and its own reconciler, running with leases and
// following the announcements as replicas behind a load balancer do, and
// both drive the same node.
type raceEnv struct {
	st       store.Store
	tenant   string
	node     *raceNode
	replicas []*Sandboxes
}

// raceNodeID is the node every sandbox of the test runs on.
const raceNodeID = "n1"

func newRaceEnv(t *testing.T) *raceEnv {
	t.Helper()
	db, tenant, _ := newTestStore(t)
	st := newAnnouncingStore(db)
	objs, err := filestore.Open(t.Context(), filepath.Join(t.TempDir(), "objects"))
	if err != nil {
		t.Fatalf("open object store: %v", err)
	}
	t.Cleanup(func() { objs.Close() })
	env := &raceEnv{st: st, tenant: tenant, node: newRaceNode(objs)}
	env.putNode(t.Context(), t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var recs []*reconcile.Reconciler
	for i := range 2 {
		rec := reconcile.New(reconcile.Config{
			Workers: 4, Resync: 200 * time.Millisecond, StartTimeout: 5 * time.Second,
			NodeLostAfter: -1, Replica: fmt.Sprintf("replica-%d", i),
			Objects: objs, TenantKey: func(ctx context.Context, tenant string) (string, error) { return "key-" + tenant, nil },
		}, st, func(id string) (reconcile.NodeAPI, error) {
			if id != raceNodeID {
				return nil, fmt.Errorf("node %s: %w", id, errdefs.ErrUnavailable)
			}
			return env.node, nil
		}, log)
		recs = append(recs, rec)
		env.replicas = append(env.replicas, New(Config{}, st, rec, raceBeats{}, time.Now(), log))
		wg.Add(2)
		go func() {
			defer wg.Done()
			rec.Run(ctx)
		}()
		go func() {
			defer wg.Done()
			rec.FollowChanges(ctx)
		}()
	}
	// The node's heartbeat, heard by both replicas.
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				env.st.Heartbeat(ctx, raceNodeID, time.Now().UTC())
				for _, rec := range recs {
					rec.Observe(raceNodeID, env.node.report())
				}
			}
		}
	}()
	return env
}

// deleteAll deletes every sandbox of the test's tenant (a check's sandbox
// and its forks), so that each check starts from an empty store and the
// reconcilers' resyncs stay small.
func (env *raceEnv) deleteAll(t *rapid.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sbs, err := env.st.ListSandboxes(ctx, store.SandboxFilter{Tenant: env.tenant})
	if err != nil {
		t.Fatalf("list sandboxes: %v", err)
	}
	for _, sb := range sbs {
		err := env.replicas[0].Delete(ctx, Caller{Tenant: env.tenant}, sb.ID)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("clean up sandbox %s (%s): %v", sb.ID, sb.State, err)
		}
	}
}

// putNode registers the node, big enough for every sandbox of the test.
func (env *raceEnv) putNode(ctx context.Context, t testing.TB) {
	err := env.st.PutNode(ctx, store.Node{
		ID: raceNodeID, Address: raceNodeID + ":7071", Runtimes: []string{"ns"}, State: store.NodeReady,
		Capacity: store.Resources{CPUs: 1 << 20, MemoryMiB: 1 << 30, DiskMiB: 1 << 30}, LastHeartbeat: time.Now().UTC(),
	})
	if err != nil {
		t.Fatalf("put node: %v", err)
	}
}

// newSandbox records a running sandbox whose first execution the node runs.
func (env *raceEnv) newSandbox(t *rapid.T) *sandbox.Sandbox {
	sb := sandbox.New(env.tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, time.Now())
	sb.State, sb.Desired, sb.Node = sandbox.StateRunning, sandbox.StateRunning, raceNodeID
	if err := env.st.CreateSandbox(context.Background(), sb); err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	env.node.adopt(nodev1.Execution{ExecID: sb.ExecID, SandboxID: sb.ID, Generation: sb.Generation, ActivationID: sb.ActivationID, Runtime: "ns", Template: "minimal"})
	return sb
}

// run runs op on sandbox id through replica s and returns its error; snap
// is the snapshot a rollback goes back to. A fork that succeeded returns
// its child.
func (env *raceEnv) run(ctx context.Context, s *Sandboxes, id string, op raceOp, snap string) (child string, err error) {
	c := Caller{Tenant: env.tenant}
	switch op {
	case racePause, raceResume, raceStop, raceHibernate, raceRestore:
		_, err = s.Lifecycle(ctx, c, id, sandbox.Op(op))
	case raceStart:
		_, err = s.Start(ctx, c, id)
	case raceRollback:
		_, err = s.Rollback(ctx, c, id, snap)
	case raceSnapshot:
		_, err = s.TakeSnapshot(ctx, c, id, store.SnapshotDisk, TierManual)
	case raceDelete:
		err = s.Delete(ctx, c, id)
	case raceTTL:
		_, err = s.SetTimeout(ctx, c, id, time.Nanosecond)
	case raceFork:
		var sb *sandbox.Sandbox
		if sb, err = s.Fork(ctx, c, id, ForkParams{}); err == nil {
			child = sb.ID
		}
	default:
		panic("unknown op " + op)
	}
	return child, err
}

// checkForks fails unless every fork of parent (a sandbox started from one
// of its snapshots) has settled running with exactly its execution on the
// node, or failed with none; the children forks answered are running. A
// fork of a sandbox with a timeout inherits it: when expiring, an answered
// child may be deleted already (and its node then runs nothing of it).
func (env *raceEnv) checkForks(t *rapid.T, parent string, answered []string, expiring bool) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		why := env.forksWrong(parent, answered, expiring)
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("forks of %s: %s", parent, why)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (env *raceEnv) forksWrong(parent string, answered []string, expiring bool) string {
	ctx := context.Background()
	sbs, err := env.st.ListSandboxes(ctx, store.SandboxFilter{Tenant: env.tenant})
	if err != nil {
		return err.Error()
	}
	seen := map[string]bool{}
	for _, sb := range sbs {
		if sb.StartFrom == "" {
			continue
		}
		snap, err := env.st.GetSnapshot(ctx, "", sb.StartFrom)
		if sb.ID == parent || (err == nil && snap.SandboxID != parent) || (err != nil && !slices.Contains(answered, sb.ID)) {
			continue
		}
		seen[sb.ID] = true
		var want []string
		switch sb.State {
		case sandbox.StateRunning:
			want = []string{sb.ExecID}
		case sandbox.StateFailed:
		default:
			return fmt.Sprintf("fork %s is %s", sb.ID, sb.State)
		}
		if live := env.node.live(sb.ID); !slices.Equal(live, want) {
			return fmt.Sprintf("fork %s is %s; the node runs %q", sb.ID, sb.State, live)
		}
		if slices.Contains(answered, sb.ID) && sb.State != sandbox.StateRunning {
			return fmt.Sprintf("fork %s was answered ok and is %s (%s)", sb.ID, sb.State, sb.Reason)
		}
	}
	for _, id := range answered {
		switch {
		case seen[id]:
		case !expiring:
			return fmt.Sprintf("fork %s was answered ok and is not recorded", id)
		case len(env.node.live(id)) > 0:
			return fmt.Sprintf("fork %s expired and is deleted; the node runs %q", id, env.node.live(id))
		}
	}
	return ""
}

// observed reads what the sandbox is now as the model sees it; the row
// gone is deleted.
func (env *raceEnv) observed(id string) (modelSandbox, *sandbox.Sandbox, error) {
	sb, err := env.st.GetSandboxByID(context.Background(), id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return modelSandbox{State: sandbox.StateDeleted}, nil, nil
	}
	if err != nil {
		return modelSandbox{}, nil, err
	}
	return modelSandbox{State: sb.State, Generation: sb.Generation, StartFrom: sb.StartFrom != "", Expiring: !sb.ExpiresAt.IsZero()}, sb, nil
}

// quiet waits until the sandbox has settled, no snapshot of it is being
// taken, and the node runs exactly the execution the record names (none
// when it holds none), and returns the settled record; after a wait it
// fails with what differs.
func (env *raceEnv) quiet(t *rapid.T, id, batch string) (modelSandbox, *sandbox.Sandbox) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, sb, err := env.observed(id)
		if err != nil {
			t.Fatalf("read sandbox: %v", err)
		}
		why := ""
		switch {
		case m.State.Transitional():
			why = "the sandbox is still " + string(m.State)
		case m.Expiring:
			why = "its timeout has passed and it is not deleted yet"
		case sb != nil && len(env.pending(id)) > 0:
			why = fmt.Sprintf("snapshots %v are still being taken", env.pending(id))
		case sb == nil && len(env.left(id)) > 0:
			why = fmt.Sprintf("the sandbox is deleted and its snapshots %v are left", env.left(id))
		}
		var want []string
		if sb != nil && (sb.State == sandbox.StateRunning || sb.State == sandbox.StatePaused) {
			w := sb.ExecID
			if sb.State == sandbox.StatePaused {
				w += "(paused)"
			}
			want = []string{w}
		}
		live := env.node.live(id)
		if why == "" && !slices.Equal(live, want) {
			why = fmt.Sprintf("the node runs %q; the record (%s, exec %s) says %q", live, m.State, execOf(sb), want)
		}
		if why == "" {
			return m, sb
		}
		if time.Now().After(deadline) {
			t.Fatalf("not quiet 10 s after %s: %s", batch, why)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func execOf(sb *sandbox.Sandbox) string {
	if sb == nil {
		return "-"
	}
	return sb.ExecID
}

// pending lists the sandbox's snapshots still in state creating.
func (env *raceEnv) pending(id string) []string {
	snaps, err := env.st.ListSnapshots(context.Background(), store.SnapshotFilter{SandboxID: id, State: store.SnapshotCreating})
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, s := range snaps {
		out = append(out, s.ID)
	}
	return out
}

// left lists the snapshot rows of sandbox id in any state.
func (env *raceEnv) left(id string) []string {
	snaps, err := env.st.ListSnapshots(context.Background(), store.SnapshotFilter{SandboxID: id})
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, s := range snaps {
		out = append(out, s.ID+"("+string(s.State)+")")
	}
	return out
}

// readySnapshot returns one of the sandbox's ready snapshots on its node
// ("" when none), for a rollback.
func (env *raceEnv) readySnapshot(t *rapid.T, id string) string {
	all, err := env.st.ListSnapshots(context.Background(), store.SnapshotFilter{SandboxID: id, State: store.SnapshotReady})
	if err != nil {
		return ""
	}
	// A rollback starts from a snapshot on a node (one only in object
	// storage, a hibernation's, is refused whatever else happens).
	snaps := slices.DeleteFunc(all, func(s store.Snapshot) bool { return s.Node == "" })
	if len(snaps) == 0 {
		return ""
	}
	return snaps[rapid.IntRange(0, len(snaps)-1).Draw(t, "snapshot")].ID
}

// TestConcurrentLifecycle (F-7, T0) runs random batches of lifecycle
// operations at once on one sandbox, from two control-plane replicas
// (each with its reconciler, under leases) over one store and one node,
// and checks after each batch, against the sequential model
// (racemodel_test.go):
//
//   - every outcome is one that some sequential order explains: an
//     accepted operation's result, a refused one's conflict (nothing
//     applied), an overtaken one's error, and the state reached;
//   - generations only grow, and a deleted sandbox never comes back;
//   - the node runs exactly the execution the record names, never an
//     older generation's start or a stopped execution started again (no
//     zombie activation).
func TestConcurrentLifecycle(t *testing.T) {
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		// About 20 s on an idle machine; -rapid.checks=N runs more or fewer.
		f.Value.Set("800")
	}
	env := newRaceEnv(t)
	rapid.Check(t, func(t *rapid.T) {
		sb := env.newSandbox(t)
		defer env.deleteAll(t)
		m := modelSandbox{State: sb.State, Generation: sb.Generation}
		steps := rapid.IntRange(1, 5).Draw(t, "steps")
		for range steps {
			n := rapid.IntRange(2, 3).Draw(t, "batch")
			ops := make([]raceOp, n)
			on := make([]int, n)
			snaps := make([]string, n)
			for i := range ops {
				ops[i] = rapid.SampledFrom(raceOps).Draw(t, "op")
				on[i] = rapid.IntRange(0, len(env.replicas)-1).Draw(t, "replica")
				if ops[i] == raceRollback {
					if snaps[i] = env.readySnapshot(t, sb.ID); snaps[i] == "" {
						ops[i] = raceSnapshot
					}
				}
			}
			got := make([]outcome, n)
			errs := make([]error, n)
			children := make([]string, n)
			var wg sync.WaitGroup
			for i := range ops {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
					defer cancel()
					children[i], errs[i] = env.run(ctx, env.replicas[on[i]], sb.ID, ops[i], snaps[i])
					got[i] = classify(errs[i])
				}()
			}
			wg.Wait()
			after, rec := env.quiet(t, sb.ID, fmt.Sprintf("%v from %s (outcomes %v, errors %v)", ops, m, got, errs))
			env.checkForks(t, sb.ID, slices.DeleteFunc(children, func(id string) bool { return id == "" }), m.Expiring || slices.Contains(ops, raceTTL))
			if v := env.node.takeViolations(); len(v) > 0 {
				t.Fatalf("zombie activations after %v from %s: %q", ops, m, v)
			}
			if rec != nil && rec.Generation < m.Generation {
				t.Fatalf("generation went back from %d to %d after %v", m.Generation, rec.Generation, ops)
			}
			if m.State == sandbox.StateDeleted && after.State != sandbox.StateDeleted {
				t.Fatalf("a deleted sandbox came back as %s after %v", after, ops)
			}
			order, ok := explain(m, ops, got, after)
			if !ok {
				t.Fatalf("no sequential order explains %v from %s: outcomes %v (errors %v), ended %s", ops, m, got, errs, after)
			}
			t.Logf("%v from %s: %v, explained by %s", ops, m, got, order)
			m = after
		}
	})
}
