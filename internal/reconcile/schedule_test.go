package reconcile

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/retention"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// createdAgo makes a sandbox look created d ago.
func createdAgo(d time.Duration) func(sb *sandbox.Sandbox) {
	return func(sb *sandbox.Sandbox) { sb.CreatedAt = time.Now().Add(-d).UTC() }
}

func TestScheduledSnapshotIsAskedForThenTaken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Schedule: retention.Schedule{DiskEvery: time.Minute}}, false)
	sb := h.newSandbox(sandbox.StateRunning, "ns", createdAgo(2*time.Minute))
	h.observe("n1", exec(sb, nodev1.ExecRunning))

	after := h.mustPass(sb.ID)
	if after <= 0 || after > time.Second {
		t.Errorf("after asking for a snapshot: after = %v, want a prompt requeue", after)
	}
	rows := h.snapshots(sb.ID)
	if len(rows) != 1 {
		t.Fatalf("snapshot rows = %d, want 1", len(rows))
	}
	row := rows[0]
	if row.State != store.SnapshotCreating || row.Tier != autoTier || row.Kind != store.SnapshotDisk ||
		row.Node != "n1" || row.Generation != sb.Generation {
		t.Fatalf("scheduled row = %+v, want a creating disk row of tier auto on n1", row)
	}
	wantCalls(t, h.nodes["n1"])

	// The next pass takes it, and asks for no other before the period.
	after = h.mustPass(sb.ID)
	wantCalls(t, h.nodes["n1"], "Snapshot("+sb.ExecID+")")
	if req := h.nodes["n1"].callsTo("Snapshot")[0].Body.(nodev1.TakeSnapshot); req != (nodev1.TakeSnapshot{SnapshotID: row.ID, Kind: "disk"}) {
		t.Errorf("Snapshot request = %+v, want %s disk", req, row.ID)
	}
	if got := h.getSnapshot(row.ID); got.State != store.SnapshotReady || got.SizeBytes != 4096 {
		t.Errorf("row after the pass: %s, %d bytes; want ready, 4096", got.State, got.SizeBytes)
	}
	if after < 50*time.Second || after > time.Minute {
		t.Errorf("after = %v, want about a minute (the next snapshot)", after)
	}
	h.mustPass(sb.ID)
	if rows := h.snapshots(sb.ID); len(rows) != 1 {
		t.Errorf("snapshot rows after a third pass = %d, want 1", len(rows))
	}
	h.wantEvent(sb.ID, "snapshot", "disk snapshot "+row.ID+" taken (auto, 4096 bytes)")
}

func TestScheduledSnapshotKinds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		runtime string
		sched   retention.Schedule
		want    store.SnapshotKind // "": none
	}{
		{"vm full", "vm", retention.Schedule{DiskEvery: time.Minute, FullEvery: time.Minute}, store.SnapshotFull},
		{"ns never full", "ns", retention.Schedule{DiskEvery: time.Minute, FullEvery: time.Minute}, store.SnapshotDisk},
		{"ns with only a full schedule", "ns", retention.Schedule{FullEvery: time.Minute}, ""},
		{"not yet due", "vm", retention.Schedule{DiskEvery: time.Hour}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{Schedule: tc.sched}, false)
			sb := h.newSandbox(sandbox.StateRunning, tc.runtime, createdAgo(2*time.Minute))
			h.observe("n1", exec(sb, nodev1.ExecRunning))
			h.mustPass(sb.ID)
			rows := h.snapshots(sb.ID)
			if tc.want == "" {
				if len(rows) != 0 {
					t.Fatalf("rows = %+v, want none", rows)
				}
				return
			}
			if len(rows) != 1 || rows[0].Kind != tc.want {
				t.Fatalf("rows = %+v, want one %s", rows, tc.want)
			}
		})
	}
}

func TestRetentionPrunesOldScheduledSnapshots(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Schedule: retention.Schedule{DiskEvery: time.Hour}}, true)
	sb := h.newSandbox(sandbox.StateRunning, "ns", createdAgo(400*time.Hour))
	auto := func(age time.Duration, node string) store.Snapshot {
		return h.snapshot(sb, func(s *store.Snapshot) {
			s.Tier, s.Node, s.CreatedAt = autoTier, node, time.Now().Add(-age).UTC()
		})
	}
	pinned := auto(300*time.Hour, "n1")
	onNode := auto(250*time.Hour, "n1")
	inObjects := auto(200*time.Hour, "")
	objs := h.uploaded(inObjects, "disk.enc")
	h.setArtifacts(inObjects.ID, objs)
	newest := auto(30*time.Second, "n1")
	manual := h.snapshot(sb, func(s *store.Snapshot) { s.CreatedAt = time.Now().Add(-300 * time.Hour).UTC() })
	failed := h.snapshot(sb, func(s *store.Snapshot) {
		s.Tier, s.State, s.CreatedAt = autoTier, store.SnapshotFailed, time.Now().Add(-300*time.Hour).UTC()
	})
	sb.StartFrom = pinned.ID
	if err := h.st.UpdateSandbox(h.ctx, sb); err != nil {
		t.Fatal(err)
	}
	h.observe("n1", exec(sb, nodev1.ExecRunning))

	h.mustPass(sb.ID)
	var left []string
	for _, s := range h.snapshots(sb.ID) {
		left = append(left, s.ID)
	}
	want := []string{pinned.ID, manual.ID, failed.ID, newest.ID}
	slices.Sort(left)
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Fatalf("snapshots left = %v, want %v (pinned, manual, failed, newest)", left, want)
	}
	wantCalls(t, h.nodes["n1"], "DeleteSnapshot("+onNode.ID+")")
	h.wantObject(objs[0].Key, false)
	h.wantEvent(sb.ID, "snapshot", onNode.ID+" of ")
	h.wantEvent(sb.ID, "snapshot", "pruned by retention")
}

func TestIdle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		action       string
		lastActivity time.Duration // ago; 0: unknown
		updated      time.Duration // ago; 0: just now
		state        sandbox.State
	}{
		{"idle pauses", sandbox.IdlePause, time.Hour, time.Hour, sandbox.StatePausing},
		{"idle hibernates", sandbox.IdleHibernate, time.Hour, time.Hour, sandbox.StateHibernating},
		{"idle pauses held", sandbox.IdlePauseHeld, time.Hour, time.Hour, sandbox.StatePausing},
		{"idle stops", sandbox.IdleStop, time.Hour, time.Hour, sandbox.StateStopping},
		{"recent request", sandbox.IdlePause, 10 * time.Second, time.Hour, sandbox.StateRunning},
		{"recent resume", sandbox.IdlePause, time.Hour, 0, sandbox.StateRunning},
		{"activity unknown", sandbox.IdlePause, 0, time.Hour, sandbox.StateRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{}, false)
			sb := h.newSandbox(sandbox.StateRunning, "ns", func(sb *sandbox.Sandbox) {
				sb.IdleTimeout, sb.IdleAction = time.Minute, tc.action
			})
			if tc.updated > 0 {
				h.st.backdate(sb.ID, tc.updated)
			}
			ex := exec(sb, nodev1.ExecRunning)
			if tc.lastActivity > 0 {
				ex.LastActivity = time.Now().Add(-tc.lastActivity)
			}
			h.observe("n1", ex)
			after := h.mustPass(sb.ID)
			got := h.wantState(sb.ID, tc.state, sandbox.Settled(tc.state))
			if tc.state == sandbox.StateRunning {
				wantCalls(t, h.nodes["n1"])
				return
			}
			if after == 0 {
				t.Errorf("after = 0, want a prompt requeue")
			}
			if got.ExecID != sb.ExecID {
				t.Errorf("exec changed")
			}
			h.wantEvent(sb.ID, "idle", "no request for ")
			if tc.state == sandbox.StatePausing {
				h.mustPass(sb.ID)
				h.wantState(sb.ID, sandbox.StatePaused, sandbox.StatePaused)
				wantCalls(t, h.nodes["n1"], "Pause("+sb.ExecID+")")
			}
		})
	}
}

func TestPendingSnapshots(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		state  sandbox.State
		err    error
		want   store.SnapshotState
		reason string
	}{
		{name: "running", state: sandbox.StateRunning, want: store.SnapshotReady},
		{name: "paused", state: sandbox.StatePaused, want: store.SnapshotReady},
		{name: "stopped", state: sandbox.StateStopped, want: store.SnapshotFailed, reason: "the sandbox is stopped"},
		{name: "hibernated", state: sandbox.StateHibernated, want: store.SnapshotFailed, reason: "the sandbox is hibernated"},
		{name: "failed", state: sandbox.StateFailed, want: store.SnapshotFailed, reason: "the sandbox is failed"},
		{name: "refused by the node", state: sandbox.StateRunning, err: errdefs.ErrFailedPrecondition, want: store.SnapshotFailed, reason: "failed precondition"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{}, false)
			sb := h.newSandbox(tc.state, "ns", nil)
			row := h.snapshot(sb, func(s *store.Snapshot) { s.State, s.Node = store.SnapshotCreating, "n1" })
			if tc.err != nil {
				h.nodes["n1"].failNext("Snapshot", 1, tc.err)
			}
			h.mustPass(sb.ID)
			got := h.getSnapshot(row.ID)
			if got.State != tc.want {
				t.Fatalf("snapshot %s, want %s (reason %q)", got.State, tc.want, got.Reason)
			}
			if tc.want == store.SnapshotReady {
				wantCalls(t, h.nodes["n1"], "Snapshot("+sb.ExecID+")")
				if got.Node != "n1" || got.SizeBytes != 4096 || got.Reason != "" {
					t.Errorf("ready snapshot = %+v, want on n1, 4096 bytes", got)
				}
				return
			}
			if !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("reason = %q, want it to contain %q", got.Reason, tc.reason)
			}
			h.wantEvent(sb.ID, "snapshot", "snapshot "+row.ID+" failed")
			h.wantState(sb.ID, tc.state, sandbox.Settled(tc.state))
		})
	}
}

func TestPendingSnapshotNodeUnavailable(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
	row := h.snapshot(sb, func(s *store.Snapshot) { s.State = store.SnapshotCreating })
	h.nodes["n1"].failNext("Snapshot", 1, errdefs.ErrUnavailable)
	after, err := h.pass(sb.ID)
	if !errdefs.IsUnavailable(err) || after <= 0 {
		t.Fatalf("pass = %v, %v; want a requeue with unavailable", after, err)
	}
	if got := h.getSnapshot(row.ID); got.State != store.SnapshotCreating {
		t.Fatalf("snapshot %s, want still creating", got.State)
	}
	h.mustPass(sb.ID)
	if got := h.getSnapshot(row.ID); got.State != store.SnapshotReady {
		t.Fatalf("snapshot %s, want ready", got.State)
	}
}

// A snapshot asked for just before a lifecycle operation (a manual one
// racing a pause, or the schedule's) must not hold the operation back
// forever: the operation goes ahead and the snapshot is then taken (paused)
// or settled.
func TestPendingSnapshotDoesNotBlockTheLifecycle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		state sandbox.State
		want  sandbox.State
	}{
		{sandbox.StatePausing, sandbox.StatePaused},
		{sandbox.StateResuming, sandbox.StateRunning},
		{sandbox.StateStopping, sandbox.StateStopped},
		{sandbox.StateDeleting, sandbox.StateDeleted},
	} {
		t.Run(string(tc.state), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{}, false)
			sb := h.newSandbox(tc.state, "ns", nil)
			h.snapshot(sb, func(s *store.Snapshot) { s.State = store.SnapshotCreating })
			for range 5 {
				if _, err := h.pass(sb.ID); err != nil {
					t.Fatalf("pass: %v", err)
				}
			}
			if tc.want == sandbox.StateDeleted {
				if _, err := h.st.GetSandboxByID(h.ctx, sb.ID); !errdefs.IsNotFound(err) {
					t.Fatalf("sandbox not deleted: %v (%v)", err, h.get(sb.ID).State)
				}
				return
			}
			h.wantState(sb.ID, tc.want, tc.want)
			for _, s := range h.snapshots(sb.ID) {
				if s.State == store.SnapshotCreating {
					t.Errorf("snapshot %s (%s) still pending", s.ID, s.Tier)
				}
			}
		})
	}
}

func TestRunDrivesQueuedSandboxes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{Workers: 2, Resync: time.Hour}, false)
	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	w := h.r.Watch(sb.ID)
	defer w.Stop()
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- h.r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// Run's first resync queues the sandbox; the worker starts it and
	// notifies the watch.
	deadline := time.After(30 * time.Second)
	for h.get(sb.ID).State != sandbox.StateRunning {
		select {
		case <-w.C:
		case <-deadline:
			t.Fatalf("sandbox still %s", h.get(sb.ID).State)
		}
	}
	wantCalls(t, h.nodes["n1"], "Start("+sb.ExecID+")")
}
