package server

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// TestBuildNodesOfASnapshotSource: a snapshot:ID template is built only on
// the node holding the snapshot (another node has no such tree: its failure
// was ignored once one node built it, and a template "built" on a node
// without the snapshot would be a wrong result there); other sources build
// on every live node; a snapshot on no node is refused with what to do.
func TestBuildNodesOfASnapshotSource(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "acme", CreatedAt: time.Now().UTC()}
	if err := st.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	for _, sn := range []store.Snapshot{
		{ID: "sn-on2", SandboxID: "sb-x", Tenant: tn.ID, Kind: store.SnapshotDisk, Tier: "manual", State: store.SnapshotReady, Node: "n2", Runtime: "ns", Template: "minimal", CreatedAt: time.Now()},
		{ID: "sn-uploaded", SandboxID: "sb-x", Tenant: tn.ID, Kind: store.SnapshotDisk, Tier: "manual", State: store.SnapshotReady, Runtime: "ns", Template: "minimal", CreatedAt: time.Now()},
	} {
		if err := st.CreateSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
	}
	srv := New(Config{}, st, NewNodes(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	now := time.Now()
	live := func(id string) store.Node { return store.Node{ID: id, State: store.NodeReady, LastHeartbeat: now} }
	stale := live("n4")
	stale.LastHeartbeat = now.Add(-time.Minute)
	all := []store.Node{live("n1"), live("n2"), live("n3"), stale}

	for _, tc := range []struct {
		source string
		want   []string
	}{
		{"builtin:minimal", []string{"n1", "n2", "n3"}},
		{"dir:/srv/tree", []string{"n1", "n2", "n3"}},
		{"snapshot:sn-on2", []string{"n2"}},
	} {
		only, err := srv.sourceNode(ctx, tc.source)
		if err != nil {
			t.Fatalf("%s: %v", tc.source, err)
		}
		var got []string
		for _, n := range buildNodes(all, only, now) {
			got = append(got, n.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s builds on %v, want %v", tc.source, got, tc.want)
		}
	}
	// The snapshot's node is not live: nothing to build on (buildOnNodes
	// waits, then says which node it needs).
	if got := buildNodes([]store.Node{live("n1"), live("n3")}, "n2", now); len(got) != 0 {
		t.Errorf("snapshot on n2, n2 not live: builds on %v, want none", got)
	}
	if _, err := srv.sourceNode(ctx, "snapshot:sn-uploaded"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("snapshot on no node: %v, want FailedPrecondition", err)
	}
	if _, err := srv.sourceNode(ctx, "snapshot:sn-missing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing snapshot: %v, want NotFound", err)
	}
}

// TestRetryBuild: a build round that failed on every node is tried again
// only when each failure is Unavailable (a node-manager killed mid-build
// and restarting, e2e.TestNodeManagerFailpoints' template points), and at
// most buildAttempts rounds run; a failure of the build itself (a bad
// source) is final at once.
func TestRetryBuild(t *testing.T) {
	gone := fmt.Errorf("node n1: %w: node-manager ensure_template: EOF (the node-manager went away before it answered; retry)", errdefs.ErrUnavailable)
	bad := fmt.Errorf("node n2: %w: template source dir:/nope: no such directory", errdefs.ErrInvalidArgument)
	for _, tc := range []struct {
		errs     []error
		attempts int
		want     bool
	}{
		{[]error{gone}, 1, true},
		{[]error{gone, gone}, buildAttempts - 1, true},
		{[]error{gone}, buildAttempts, false},
		{[]error{bad}, 1, false},
		{[]error{gone, bad}, 1, false},
		{nil, 1, false},
	} {
		if got := retryBuild(tc.errs, tc.attempts); got != tc.want {
			t.Errorf("retryBuild(%v, %d) = %v, want %v", tc.errs, tc.attempts, got, tc.want)
		}
	}
}

// TestPoolTargetsSkipTemplatesOfAnotherNode: a warm pool of a template that
// exists on one node alone (built from a snapshot there) is asked of that
// node only; another node would fail to fill it, forever.
func TestPoolTargetsSkipTemplatesOfAnotherNode(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, tpl := range []store.Template{
		{Name: "minimal", Source: "builtin:minimal", State: store.TemplateReady},
		{Name: "built", Source: "snapshot:sn-x", State: store.TemplateReady, Node: "n2"},
	} {
		if err := st.CreateTemplate(ctx, tpl); err != nil {
			t.Fatal(err)
		}
	}
	pools := []WarmPool{{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256, Size: 1}, {Template: "built", Runtime: "ns", CPUs: 1, MemoryMiB: 256, Size: 1}}
	srv := New(Config{WarmPools: pools}, st, NewNodes(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for node, want := range map[string][]string{"n1": {"minimal"}, "n2": {"minimal", "built"}} {
		var got []string
		for _, p := range *srv.poolTargets(ctx, node, []string{"ns"}) {
			got = append(got, p.Template)
		}
		if !slices.Equal(got, want) {
			t.Errorf("pools of %s: %v, want %v", node, got, want)
		}
	}
}
