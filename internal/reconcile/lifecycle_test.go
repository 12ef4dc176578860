package reconcile

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

func TestCreateStartsTheExecution(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateCreating, "ns", func(sb *sandbox.Sandbox) { sb.Env = map[string]string{"A": "1"} })
	if after := h.mustPass(sb.ID); after != 0 {
		t.Errorf("after = %v, want 0 (nothing left to do)", after)
	}
	got := h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	if got.Generation != sb.Generation || got.ExecID != sb.ExecID || got.Node != "n1" {
		t.Errorf("execution changed: generation %d exec %s node %s, want %d %s n1", got.Generation, got.ExecID, got.Node, sb.Generation, sb.ExecID)
	}
	starts := h.nodes["n1"].callsTo("Start")
	if len(starts) != 1 {
		t.Fatalf("Start called %d times, want 1", len(starts))
	}
	req := starts[0].Body.(nodev1.StartExecution)
	want := nodev1.StartExecution{
		ExecID: sb.ExecID, SandboxID: sb.ID, Generation: sb.Generation, ActivationID: sb.ActivationID,
		Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256,
	}
	if req.ExecID != want.ExecID || req.SandboxID != want.SandboxID || req.Generation != want.Generation ||
		req.ActivationID != want.ActivationID || req.Template != want.Template || req.Runtime != want.Runtime ||
		req.CPUs != want.CPUs || req.MemoryMiB != want.MemoryMiB || req.Env["A"] != "1" || req.Snapshot != "" {
		t.Errorf("Start request = %+v, want %+v with env A=1", req, want)
	}
	h.wantEvent(sb.ID, "state", "running on n1")
	// A second pass over a running sandbox the node has not reported yet
	// does nothing.
	h.mustPass(sb.ID)
	if n := len(h.nodes["n1"].callsTo("Start")); n != 1 {
		t.Errorf("Start called %d times after a second pass, want 1", n)
	}
}

func TestCreateFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		setup   func(h *harness, sb *sandbox.Sandbox)
		noNode  bool
		reasons []string
	}{
		{
			name: "start refused",
			setup: func(h *harness, sb *sandbox.Sandbox) {
				h.nodes["n1"].failNext("Start", 1, errors.Join(errors.New("template minimal is missing"), errdefs.ErrFailedPrecondition))
			},
			reasons: []string{"start: ", "template minimal is missing"},
		},
		{
			name: "execution failed at start",
			setup: func(h *harness, sb *sandbox.Sandbox) {
				h.nodes["n1"].startExec = &nodev1.Execution{State: nodev1.ExecFailed, Reason: "guest did not answer"}
			},
			reasons: []string{"start: guest did not answer"},
		},
		{
			name: "node unavailable past the start timeout",
			setup: func(h *harness, sb *sandbox.Sandbox) {
				h.nodes["n1"].failAlways("Start", errdefs.ErrUnavailable)
				h.st.backdate(sb.ID, 10*time.Minute)
			},
			reasons: []string{"start: ", "unavailable"},
		},
		{
			name: "node unreachable past the start timeout",
			setup: func(h *harness, sb *sandbox.Sandbox) {
				h.down["n1"] = true
				h.st.backdate(sb.ID, 10*time.Minute)
			},
			reasons: []string{"node n1 unreachable"},
		},
		{
			name:    "no node",
			noNode:  true,
			reasons: []string{"no node was chosen"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{}, false)
			sb := h.newSandbox(sandbox.StateCreating, "ns", func(sb *sandbox.Sandbox) {
				if tc.noNode {
					sb.Node = ""
				}
			})
			if tc.setup != nil {
				tc.setup(h, sb)
			}
			after, err := h.pass(sb.ID)
			if err != nil {
				t.Fatalf("pass: %v", err)
			}
			if after == 0 {
				t.Errorf("after = 0, want a prompt requeue to release what the node holds")
			}
			got := h.wantState(sb.ID, sandbox.StateFailed, sandbox.StateFailed)
			wantReason(t, got, tc.reasons...)
			h.wantEvent(sb.ID, "failed", tc.reasons[0])
		})
	}
}

func TestCreateWaitsForAnUnreachableNode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	h.down["n1"] = true
	after, err := h.pass(sb.ID)
	if err != nil || after <= 0 {
		t.Fatalf("pass = %v, %v; want a requeue and no error", after, err)
	}
	h.wantState(sb.ID, sandbox.StateCreating, sandbox.StateRunning)

	// The node comes back but answers unavailable: retried, still creating.
	h.down["n1"] = false
	h.nodes["n1"].failNext("Start", 1, errdefs.ErrUnavailable)
	after, err = h.pass(sb.ID)
	if !errdefs.IsUnavailable(err) || after <= 0 {
		t.Fatalf("pass = %v, %v; want a requeue with the unavailable error", after, err)
	}
	h.wantState(sb.ID, sandbox.StateCreating, sandbox.StateRunning)

	// Then it starts: the same execution id, so a start the node already
	// made is found, not duplicated.
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	starts := h.nodes["n1"].callsTo("Start")
	if len(starts) != 2 || starts[0].Arg != sb.ExecID || starts[1].Arg != sb.ExecID {
		t.Errorf("Start calls = %v, want two for %s", starts, sb.ExecID)
	}
}

func TestCreateDeletedWhileTheNodeStarts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	// While the node works, a client deletes the sandbox.
	h.nodes["n1"].onCall("Start", func() {
		cur := h.get(sb.ID)
		if err := cur.Apply(sandbox.OpDelete); err != nil {
			t.Errorf("apply delete: %v", err)
			return
		}
		if err := h.st.UpdateSandbox(h.ctx, cur); err != nil {
			t.Errorf("update: %v", err)
		}
	})
	after := h.mustPass(sb.ID)
	if after == 0 {
		t.Errorf("after = 0, want a requeue to read the news")
	}
	h.wantState(sb.ID, sandbox.StateDeleting, sandbox.StateDeleted)
	h.nodes["n1"].onCall("Start", nil)
	h.mustPass(sb.ID)
	if _, err := h.st.GetSandboxByID(h.ctx, sb.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("sandbox after delete pass: err = %v, want not found", err)
	}
	if stops := h.nodes["n1"].callsTo("Stop"); len(stops) != 1 || stops[0].Arg != sb.ExecID {
		t.Errorf("Stop calls = %v, want one for %s", stops, sb.ExecID)
	}
	h.wantEvent(sb.ID, "state", "deleted")
}

func TestRunningExecutionDies(t *testing.T) {
	t.Parallel()
	type snap struct {
		kind    store.SnapshotKind
		age     time.Duration
		node    string
		runtime string
	}
	for _, tc := range []struct {
		name    string
		runtime string
		cfg     Config
		snaps   []snap
		refuse  bool // the node refuses the crash snapshot of a dead ns execution
		want    int  // index into snaps of the one recovered from; -1: failed; -2: the crash snapshot
	}{
		{name: "no snapshot", runtime: "vm", want: -1},
		{
			name: "newest full wins over a newer disk", runtime: "vm",
			snaps: []snap{{store.SnapshotFull, 3 * time.Hour, "n1", "vm"}, {store.SnapshotFull, 2 * time.Hour, "n1", "vm"}, {store.SnapshotDisk, time.Hour, "n1", "vm"}},
			want:  1,
		},
		{
			name: "ns: its own disk as it died", runtime: "ns",
			snaps: []snap{{store.SnapshotDisk, 2 * time.Hour, "n1", "ns"}, {store.SnapshotDisk, time.Hour, "n1", "ns"}},
			want:  -2,
		},
		{
			name: "ns: no disk to keep, so the newest disk snapshot", runtime: "ns", refuse: true,
			snaps: []snap{{store.SnapshotDisk, 2 * time.Hour, "n1", "ns"}, {store.SnapshotDisk, time.Hour, "n1", "ns"}},
			want:  1,
		},
		{
			name: "ns: no snapshot but its own disk", runtime: "ns",
			want: -2,
		},
		{
			name: "only in object storage or of another runtime", runtime: "vm",
			snaps: []snap{{store.SnapshotFull, time.Hour, "", "vm"}, {store.SnapshotDisk, time.Hour, "n1", "ns"}},
			want:  -1,
		},
		{
			name: "recovery turned off", runtime: "ns", cfg: Config{NoRecovery: true},
			snaps: []snap{{store.SnapshotDisk, time.Hour, "n1", "ns"}},
			want:  -1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tc.cfg, false)
			sb := h.newSandbox(sandbox.StateRunning, tc.runtime, nil)
			var ids []string
			for _, s := range tc.snaps {
				row := h.snapshot(sb, func(r *store.Snapshot) {
					r.Kind, r.Node, r.Runtime, r.CreatedAt = s.kind, s.node, s.runtime, time.Now().Add(-s.age).UTC()
				})
				ids = append(ids, row.ID)
			}
			// A failed snapshot never counts, however new.
			h.snapshot(sb, func(r *store.Snapshot) {
				r.Kind, r.State, r.CreatedAt = store.SnapshotFull, store.SnapshotFailed, time.Now().UTC()
			})
			ex := exec(sb, nodev1.ExecFailed)
			ex.Reason = "guest kernel panic"
			h.observe("n1", ex)
			if tc.refuse {
				h.nodes["n1"].failAlways("Snapshot", fmt.Errorf("%w: volume gone", errdefs.ErrNotFound))
			}
			crash := sandbox.LifecycleSnapshotID(sb.ID, crashTier, sb.Generation)
			if tc.want == -2 {
				ids = append(ids, crash)
				tc.want = len(ids) - 1
			}

			after := h.mustPass(sb.ID)
			if after == 0 {
				t.Errorf("after = 0, want a prompt requeue")
			}
			if tc.want < 0 {
				got := h.wantState(sb.ID, sandbox.StateFailed, sandbox.StateFailed)
				wantReason(t, got, "guest kernel panic")
				h.wantEvent(sb.ID, "failed", "guest kernel panic")
				return
			}
			got := h.wantState(sb.ID, sandbox.StateRecovering, sandbox.StateRunning)
			if got.Generation != sb.Generation+1 || got.ExecID == sb.ExecID || got.StartFrom != ids[tc.want] || got.Node != "n1" {
				t.Fatalf("recovering: generation %d exec %s start from %s node %s; want generation %d, a new exec, %s, n1",
					got.Generation, got.ExecID, got.StartFrom, got.Node, sb.Generation+1, ids[tc.want])
			}
			h.wantEvent(sb.ID, "recovering", ids[tc.want])

			// The next pass stops the dead execution and starts the new
			// one from the snapshot.
			h.mustPass(sb.ID)
			got = h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
			n := h.nodes["n1"]
			if ids[tc.want] == crash {
				// The dead execution's disk is kept before it is stopped.
				wantCalls(t, n, "Snapshot("+sb.ExecID+")", "Stop("+sb.ExecID+")", "Start("+got.ExecID+")")
				if c := h.getSnapshot(crash); c.State != store.SnapshotReady || c.Tier != crashTier || c.Kind != store.SnapshotDisk {
					t.Errorf("crash snapshot = %+v, want a ready disk snapshot of tier %s", c, crashTier)
				}
			} else if tc.refuse {
				wantCalls(t, n, "Snapshot("+sb.ExecID+")", "Stop("+sb.ExecID+")", "Start("+got.ExecID+")")
			} else {
				wantCalls(t, n, "Stop("+sb.ExecID+")", "Start("+got.ExecID+")")
			}
			if req := n.callsTo("Start")[0].Body.(nodev1.StartExecution); req.Snapshot != ids[tc.want] || req.Generation != sb.Generation+1 {
				t.Errorf("Start from %q generation %d, want %q generation %d", req.Snapshot, req.Generation, ids[tc.want], sb.Generation+1)
			}
			h.wantEvent(sb.ID, "state", "replaced execution "+sb.ExecID+" stopped")
		})
	}
}

func TestRecoveryLoopGuard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ runtime, tier string }{
		{"vm", "manual"},
		// An ns execution that died right after a start from the disk of
		// the previous death keeps no new one: it would loop.
		{"ns", crashTier},
	} {
		t.Run(tc.runtime, func(t *testing.T) {
			t.Parallel()
			// startedFrom is a running sandbox started from a snapshot of
			// tc's tier, as a recovery leaves it.
			startedFrom := func() (*harness, *sandbox.Sandbox, store.Snapshot) {
				h := newHarness(t, Config{}, false)
				sb := h.newSandbox(sandbox.StateRunning, tc.runtime, nil)
				from := h.snapshot(sb, func(s *store.Snapshot) { s.Tier = tc.tier })
				sb.StartFrom = from.ID
				if err := h.st.UpdateSandbox(h.ctx, sb); err != nil {
					t.Fatal(err)
				}
				return h, sb, from
			}
			// The sandbox was just recovered from that very snapshot.
			h, sb, _ := startedFrom()
			h.observe("n1", exec(sb, nodev1.ExecFailed))
			h.mustPass(sb.ID)
			got := h.wantState(sb.ID, sandbox.StateFailed, sandbox.StateFailed)
			if got.Generation != sb.Generation {
				t.Errorf("generation = %d, want %d (no new execution)", got.Generation, sb.Generation)
			}
			if calls := h.nodes["n1"].callsTo("Snapshot"); len(calls) != 0 {
				t.Errorf("snapshots taken: %v, want none", calls)
			}

			// The same death long after the start from that snapshot recovers.
			h2, sb2, from2 := startedFrom()
			h2.st.backdate(sb2.ID, recoveryBackoff+time.Minute)
			h2.observe("n1", exec(sb2, nodev1.ExecFailed))
			h2.mustPass(sb2.ID)
			got = h2.wantState(sb2.ID, sandbox.StateRecovering, sandbox.StateRunning)
			want := from2.ID
			if tc.runtime == "ns" {
				// Its own disk, and the older crash snapshot superseded.
				want = sandbox.LifecycleSnapshotID(sb2.ID, crashTier, sb2.Generation)
				if old := h2.getSnapshot(from2.ID); old.State != store.SnapshotDeleting {
					t.Errorf("the superseded crash snapshot is %s, want deleting", old.State)
				}
			}
			if got.StartFrom != want || got.Generation != sb2.Generation+1 {
				t.Errorf("start from %s generation %d, want %s generation %d", got.StartFrom, got.Generation, want, sb2.Generation+1)
			}
		})
	}
}

func TestRunningExecutionVanishes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
	// Never reported: nothing to judge by.
	if after := h.mustPass(sb.ID); after != 0 {
		t.Errorf("unreported: after = %v, want 0", after)
	}
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	// Reported missing right after the sandbox changed: a grace period.
	h.observe("n1")
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	// Missing well after: failed (no snapshot to recover from).
	h.st.backdate(sb.ID, time.Minute)
	h.observe("n1")
	h.mustPass(sb.ID)
	got := h.wantState(sb.ID, sandbox.StateFailed, sandbox.StateFailed)
	wantReason(t, got, "execution "+sb.ExecID+" is no longer on node n1")
	// Judging needs no call to the node.
	if len(h.nodes["n1"].methods()) != 0 {
		t.Errorf("node calls = %v, want none", h.nodes["n1"].methods())
	}
}

func TestFailedReportFromBeforeTheLastChangeIsIgnored(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
	h.observe("n1", exec(sb, nodev1.ExecFailed))
	// The sandbox changes after the report (a resume, say): the report is stale.
	time.Sleep(2 * time.Millisecond)
	cur := h.get(sb.ID)
	if err := h.st.UpdateSandbox(h.ctx, cur); err != nil {
		t.Fatal(err)
	}
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
}

func TestExpiredSandboxIsDeleted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateRunning, "ns", func(sb *sandbox.Sandbox) { sb.ExpiresAt = time.Now().Add(-time.Second) })
	after := h.mustPass(sb.ID)
	if after == 0 {
		t.Errorf("after = 0, want a prompt requeue")
	}
	h.wantState(sb.ID, sandbox.StateDeleting, sandbox.StateDeleted)
	h.wantEvent(sb.ID, "state", "timeout reached")

	// Not yet expired: looked at again when it is.
	sb2 := h.newSandbox(sandbox.StateRunning, "ns", func(sb *sandbox.Sandbox) { sb.ExpiresAt = time.Now().Add(time.Hour) })
	h.observe("n1", exec(sb2, nodev1.ExecRunning))
	after = h.mustPass(sb2.ID)
	if after <= 50*time.Minute || after > time.Hour+time.Second {
		t.Errorf("after = %v, want about an hour (the expiry)", after)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		from      sandbox.State
		method    string
		err       error
		backdate  time.Duration
		state     sandbox.State
		desired   sandbox.State
		reason    string
		event     string
		wantRetry bool
	}{
		{name: "pause", from: sandbox.StatePausing, method: "Pause", state: sandbox.StatePaused, desired: sandbox.StatePaused, event: "state"},
		{name: "resume", from: sandbox.StateResuming, method: "Resume", state: sandbox.StateRunning, desired: sandbox.StateRunning, event: "state"},
		{
			name: "pause refused", from: sandbox.StatePausing, method: "Pause", err: errdefs.ErrFailedPrecondition,
			state: sandbox.StateRunning, desired: sandbox.StateRunning, reason: "pause refused", event: "refused",
		},
		{
			name: "resume refused", from: sandbox.StateResuming, method: "Resume", err: errdefs.ErrFailedPrecondition,
			state: sandbox.StatePaused, desired: sandbox.StatePaused, reason: "resume refused", event: "refused",
		},
		{
			name: "pause unavailable", from: sandbox.StatePausing, method: "Pause", err: errdefs.ErrUnavailable,
			state: sandbox.StatePausing, desired: sandbox.StatePaused, wantRetry: true,
		},
		{
			name: "pause unavailable past the timeout", from: sandbox.StatePausing, method: "Pause", err: errdefs.ErrUnavailable,
			backdate: 10 * time.Minute, state: sandbox.StateFailed, desired: sandbox.StateFailed, reason: "pause: ", event: "failed",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{}, false)
			sb := h.newSandbox(tc.from, "ns", nil)
			if tc.err != nil {
				h.nodes["n1"].failNext(tc.method, 1, tc.err)
			}
			if tc.backdate > 0 {
				h.st.backdate(sb.ID, tc.backdate)
			}
			after, err := h.pass(sb.ID)
			if tc.wantRetry {
				if err == nil || after <= 0 {
					t.Fatalf("pass = %v, %v; want a requeue with an error", after, err)
				}
			} else if err != nil {
				t.Fatalf("pass: %v", err)
			}
			got := h.wantState(sb.ID, tc.state, tc.desired)
			wantCalls(t, h.nodes["n1"], tc.method+"("+sb.ExecID+")")
			if tc.reason != "" {
				wantReason(t, got, tc.reason)
			}
			if tc.event != "" {
				h.wantEvent(sb.ID, tc.event, tc.reason)
			}
			if got.ExecID != sb.ExecID || got.Generation != sb.Generation {
				t.Errorf("execution changed to %s (generation %d)", got.ExecID, got.Generation)
			}
		})
	}
}

func TestStopKeepsTheDiskOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateStopping, "vm", nil)
	n := h.nodes["n1"]
	// The control plane "crashes" after the snapshot: Stop fails once.
	n.failNext("Stop", 1, errdefs.ErrUnavailable)
	after, err := h.pass(sb.ID)
	if err == nil || after <= 0 {
		t.Fatalf("first pass = %v, %v; want a requeue with the stop error", after, err)
	}
	id := sandbox.LifecycleSnapshotID(sb.ID, "stop", sb.Generation)
	snap := h.getSnapshot(id)
	if snap.State != store.SnapshotReady || snap.Kind != store.SnapshotDisk || snap.Tier != "stop" || snap.Node != "n1" || snap.SizeBytes != 4096 {
		t.Fatalf("stop snapshot = %+v, want a ready disk snapshot of tier stop on n1 of 4096 bytes", snap)
	}
	h.wantState(sb.ID, sandbox.StateStopping, sandbox.StateStopped)

	// Re-driven: the snapshot is not taken again.
	h.mustPass(sb.ID)
	got := h.wantState(sb.ID, sandbox.StateStopped, sandbox.StateStopped)
	if got.StartFrom != id {
		t.Errorf("StartFrom = %q, want %q", got.StartFrom, id)
	}
	wantCalls(t, n, "Snapshot("+sb.ExecID+")", "Stop("+sb.ExecID+")", "Stop("+sb.ExecID+")")
	req := n.callsTo("Snapshot")[0].Body.(nodev1.TakeSnapshot)
	if req.SnapshotID != id || req.Kind != "disk" || req.LeavePaused {
		t.Errorf("Snapshot request = %+v, want %s disk", req, id)
	}
	if list := h.snapshots(sb.ID); len(list) != 1 {
		t.Errorf("snapshot rows = %d, want 1", len(list))
	}
	h.wantEvent(sb.ID, "state", "stopped; disk kept as "+id)
	// A stopped sandbox needs nothing more.
	h.mustPass(sb.ID)
	if len(n.methods()) != 3 {
		t.Errorf("a pass over a stopped sandbox called the node: %v", n.methods())
	}
}

func TestStopSnapshotFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateStopping, "ns", nil)
	h.nodes["n1"].failNext("Snapshot", 1, errdefs.ErrUnavailable)
	// Unavailable: retried while the start timeout lasts.
	after, err := h.pass(sb.ID)
	if !errdefs.IsUnavailable(err) || after <= 0 {
		t.Fatalf("pass = %v, %v; want a requeue with unavailable", after, err)
	}
	h.wantState(sb.ID, sandbox.StateStopping, sandbox.StateStopped)
	// Refused: the sandbox fails, the row records why.
	h.nodes["n1"].failNext("Snapshot", 1, errdefs.ErrFailedPrecondition)
	h.mustPass(sb.ID)
	got := h.wantState(sb.ID, sandbox.StateFailed, sandbox.StateFailed)
	wantReason(t, got, "stop: keep the disk")
	snap := h.getSnapshot(sandbox.LifecycleSnapshotID(sb.ID, "stop", sb.Generation))
	if snap.State != store.SnapshotFailed || snap.Reason == "" {
		t.Errorf("stop snapshot = %s %q, want failed with a reason", snap.State, snap.Reason)
	}
	if stops := h.nodes["n1"].callsTo("Stop"); len(stops) != 0 {
		t.Errorf("Stop called %v before the disk was kept", stops)
	}
}

func TestDeleteRemovesSnapshotsAndOwnObjects(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, true)
	sb := h.newSandbox(sandbox.StateDeleting, "vm", nil)
	other := h.newSandbox(sandbox.StateRunning, "vm", nil)
	onNode := h.snapshot(sb, nil)
	onN2 := h.snapshot(sb, func(s *store.Snapshot) { s.Node = "n2" })
	hib := h.snapshot(sb, func(s *store.Snapshot) { s.Node, s.Tier = "", "hibernate" })
	otherHib := h.snapshot(other, func(s *store.Snapshot) { s.Node, s.Tier = "", "hibernate" })
	shared := sharedPrefix(h.tenant) + "base-0001"
	own := h.uploaded(hib, "memory", "disk")
	otherOwn := h.uploaded(otherHib, "memory")
	h.setArtifacts(hib.ID, append(own, h.putObject(shared, "base stream")))
	h.setArtifacts(otherHib.ID, append(otherOwn, h.putObject(shared, "base stream")))
	h.nodes["n1"].snapshots[onNode.ID] = true

	h.mustPass(sb.ID)
	if _, err := h.st.GetSandboxByID(h.ctx, sb.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("sandbox row: err = %v, want not found", err)
	}
	if list := h.snapshots(sb.ID); len(list) != 0 {
		t.Errorf("snapshot rows left: %v", list)
	}
	wantCalls(t, h.nodes["n1"], "DeleteSnapshot("+onNode.ID+")", "Stop("+sb.ExecID+")")
	wantCalls(t, h.nodes["n2"], "DeleteSnapshot("+onN2.ID+")")
	if h.nodes["n1"].holds(onNode.ID) {
		t.Errorf("node n1 still holds %s", onNode.ID)
	}
	for _, o := range own {
		h.wantObject(o.Key, false)
	}
	h.wantObject(shared, true)
	for _, o := range otherOwn {
		h.wantObject(o.Key, true)
	}
	if list := h.snapshots(other.ID); len(list) != 1 {
		t.Errorf("other sandbox's snapshots = %d, want 1", len(list))
	}
	h.wantEvent(sb.ID, "state", "deleted")
	// A pass over the deleted sandbox is a no-op.
	if after := h.mustPass(sb.ID); after != 0 {
		t.Errorf("pass over a deleted sandbox: after = %v", after)
	}
}

func TestDeleteWaitsForAnUnreachableNode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateDeleting, "ns", nil)
	snap := h.snapshot(sb, func(s *store.Snapshot) { s.Node = "n2" })
	h.down["n2"] = true
	after, err := h.pass(sb.ID)
	if err == nil || after <= 0 {
		t.Fatalf("pass = %v, %v; want a requeue with an error", after, err)
	}
	h.wantState(sb.ID, sandbox.StateDeleting, sandbox.StateDeleted)
	h.getSnapshot(snap.ID)
	if stops := h.nodes["n1"].callsTo("Stop"); len(stops) != 0 {
		t.Errorf("execution stopped before its snapshots were deleted: %v", stops)
	}
	h.down["n2"] = false
	h.mustPass(sb.ID)
	if _, err := h.st.GetSandboxByID(h.ctx, sb.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("sandbox row: err = %v, want not found", err)
	}
}

func TestFailedSandboxReleasesItsExecution(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateFailed, "ns", func(sb *sandbox.Sandbox) { sb.Reason = "boom" })
	// Not reported by its node: nothing to release.
	h.mustPass(sb.ID)
	wantCalls(t, h.nodes["n1"])
	h.observe("n1", exec(sb, nodev1.ExecFailed))
	h.mustPass(sb.ID)
	wantCalls(t, h.nodes["n1"], "Stop("+sb.ExecID+")")
	if h.r.holds(h.ctx, sb) {
		t.Errorf("the reconciler still counts %s as held", sb.ExecID)
	}
	// Released: the next pass leaves the node alone.
	h.mustPass(sb.ID)
	wantCalls(t, h.nodes["n1"], "Stop("+sb.ExecID+")")
	got := h.wantState(sb.ID, sandbox.StateFailed, sandbox.StateFailed)
	if got.Reason != "boom" {
		t.Errorf("reason = %q, want boom kept", got.Reason)
	}
}

func TestResyncStopsOrphans(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{OrphanGrace: time.Minute}, false)
	sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
	orphan := nodev1.Execution{ExecID: "aaaaaaaaaaaaaaaaaaaa-g1-bbbbbbbb", SandboxID: "aaaaaaaaaaaaaaaaaaaa", State: nodev1.ExecRunning, StartedAt: time.Now().Add(-time.Hour)}
	young := nodev1.Execution{ExecID: "cccccccccccccccccccc-g1-dddddddd", SandboxID: "cccccccccccccccccccc", State: nodev1.ExecRunning, StartedAt: time.Now()}
	h.observe("n1", exec(sb, nodev1.ExecRunning), orphan, young)
	h.r.resync(h.ctx)
	wantCalls(t, h.nodes["n1"], "Stop("+orphan.ExecID+")")
	h.r.q.mu.Lock()
	queued := append([]string(nil), h.r.q.order...)
	h.r.q.mu.Unlock()
	if len(queued) != 1 || queued[0] != sb.ID {
		t.Errorf("queued %v, want [%s]", queued, sb.ID)
	}
}

func TestAConcurrentChangeIsNotOverwritten(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StatePausing, "ns", nil)
	// While the node pauses, a client deletes the sandbox: the pass's
	// write of "paused" must lose to it.
	h.nodes["n1"].onCall("Pause", func() {
		cur := h.get(sb.ID)
		if err := cur.Apply(sandbox.OpDelete); err != nil {
			t.Errorf("apply delete: %v", err)
			return
		}
		if err := h.st.UpdateSandbox(h.ctx, cur); err != nil {
			t.Errorf("update: %v", err)
		}
	})
	after, err := h.pass(sb.ID)
	if err != nil || after <= 0 || after > time.Second {
		t.Fatalf("pass = %v, %v; want a prompt requeue and no error", after, err)
	}
	h.wantState(sb.ID, sandbox.StateDeleting, sandbox.StateDeleted)
	for _, e := range h.events(sb.ID) {
		if e == "state: paused" {
			t.Errorf("event %q recorded for a write that lost", e)
		}
	}
}

// TestPausedExecutionDies: a paused sandbox whose VMM dies is recovered
// from its latest snapshot, or fails with the reason; it never stays
// "paused" on a dead execution.
func TestPausedExecutionDies(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StatePaused, "vm", nil)
	h.snapshot(sb, nil)
	h.st.backdate(sb.ID, time.Minute)
	h.observe("n1", exec(sb, nodev1.ExecFailed))
	h.mustPass(sb.ID)
	got := h.wantState(sb.ID, sandbox.StateRecovering, sandbox.StateRunning)
	if got.Generation != sb.Generation+1 {
		t.Errorf("generation %d, want %d", got.Generation, sb.Generation+1)
	}

	h2 := newHarness(t, Config{}, false)
	sb2 := h2.newSandbox(sandbox.StatePaused, "vm", nil)
	h2.st.backdate(sb2.ID, time.Minute)
	h2.observe("n1", exec(sb2, nodev1.ExecFailed))
	h2.mustPass(sb2.ID)
	h2.wantState(sb2.ID, sandbox.StateFailed, sandbox.StateFailed)

	// A live paused execution is left alone.
	h3 := newHarness(t, Config{}, false)
	sb3 := h3.newSandbox(sandbox.StatePaused, "vm", nil)
	h3.observe("n1", exec(sb3, nodev1.ExecRunning))
	h3.mustPass(sb3.ID)
	h3.wantState(sb3.ID, sandbox.StatePaused, sandbox.StatePaused)
}

// TestSnapshotAskedOfADeletedSandboxIsDropped (F-7: delete ‖ snapshot): a
// snapshot request whose row is written after the delete removed the
// sandbox's snapshots and its row is dropped by the pass its enqueue runs,
// on the node too, so its caller's wait ends (NotFound) instead of
// lasting until it runs out. TestConcurrentLifecycle in internal/service
// found it.
func TestSnapshotAskedOfADeletedSandboxIsDropped(t *testing.T) {
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateDeleting, "ns", nil)
	h.mustPass(sb.ID) // the delete: snapshots, execution, row
	if _, err := h.st.GetSandboxByID(h.ctx, sb.ID); !errdefs.IsNotFound(err) {
		t.Fatalf("after the delete pass: %v, want the row gone", err)
	}
	// The request, checked against the sandbox before the delete, lands now.
	late := h.snapshot(sb, func(s *store.Snapshot) { s.State = store.SnapshotCreating })
	h.mustPass(sb.ID)
	if got := h.snapshots(sb.ID); len(got) != 0 {
		t.Fatalf("snapshot rows of the deleted sandbox after its pass: %+v, want none", got)
	}
	if calls := h.nodes["n1"].callsTo("DeleteSnapshot"); len(calls) != 1 || calls[len(calls)-1].Arg != late.ID {
		t.Fatalf("node DeleteSnapshot calls %v, want one of %s", calls, late.ID)
	}
}

// TestDeleteOvertakingARollbackStopsTheReplacedExecution (F-7: rollback ‖
// delete): a delete accepted after a rollback recorded its new execution,
// before the rollback's start stopped the old one, stops both: the old one
// would otherwise run on, with no record, until the orphan sweep's grace
// ran out. TestConcurrentLifecycle in internal/service found it.
func TestDeleteOvertakingARollbackStopsTheReplacedExecution(t *testing.T) {
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
	old := sb.ExecID
	h.observe("n1", exec(sb, nodev1.ExecRunning))
	snap := h.snapshot(sb, nil)
	if err := sb.Apply(sandbox.OpRollback); err != nil {
		t.Fatal(err)
	}
	sb.StartFrom, sb.Node = snap.ID, "n1"
	if err := sb.Apply(sandbox.OpDelete); err != nil {
		t.Fatal(err)
	}
	if err := h.st.UpdateSandbox(h.ctx, sb); err != nil {
		t.Fatal(err)
	}
	h.mustPass(sb.ID)
	var stopped []string
	for _, c := range h.nodes["n1"].callsTo("Stop") {
		stopped = append(stopped, c.Arg)
	}
	if !slices.Contains(stopped, old) || !slices.Contains(stopped, sb.ExecID) {
		t.Fatalf("node stops %q, want the replaced execution %s and the new one %s", stopped, old, sb.ExecID)
	}
}
