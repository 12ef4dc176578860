package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
	"github.com/spacesandbox/space/internal/objstore/objstoretest"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// putObject stores content at key in the harness's object store and returns
// the object as an upload describes it.
func (h *harness) putObject(key, content string) nodev1.Object {
	h.t.Helper()
	info, err := h.objs.Put(h.ctx, key, strings.NewReader(content), int64(len(content)))
	if err != nil {
		h.t.Fatalf("put %s: %v", key, err)
	}
	return nodev1.Object{Name: key[strings.LastIndexByte(key, '/')+1:], Key: key, Size: info.Size, Digest: info.Digest, AAD: "aad-" + key}
}

// uploaded stores objects named names under snap's own prefix.
func (h *harness) uploaded(snap store.Snapshot, names ...string) []nodev1.Object {
	h.t.Helper()
	var out []nodev1.Object
	for _, name := range names {
		out = append(out, h.putObject(snapshotPrefix(snap.Tenant, snap.ID)+name, "content of "+name+" of "+snap.ID))
	}
	return out
}

// setArtifacts records objs as the artifacts of snapshot id.
func (h *harness) setArtifacts(id string, objs []nodev1.Object) nodev1.Artifacts {
	h.t.Helper()
	arts := nodev1.Artifacts{Export: json.RawMessage(`{"format":"test"}`), Objects: objs, PlainBytes: 100, StoredBytes: 80}
	b, err := json.Marshal(arts)
	if err != nil {
		h.t.Fatal(err)
	}
	s := h.getSnapshot(id)
	s.Artifacts = string(b)
	if err := h.st.UpdateSnapshot(h.ctx, s); err != nil {
		h.t.Fatalf("update snapshot %s: %v", id, err)
	}
	return arts
}

// wantObject fails unless key is present (or absent) in the object store.
func (h *harness) wantObject(key string, present bool) {
	h.t.Helper()
	_, err := h.objs.Stat(h.ctx, key)
	switch {
	case present && err != nil:
		h.t.Errorf("object %s: %v, want present", key, err)
	case !present && !errdefs.IsNotFound(err):
		h.t.Errorf("object %s: err = %v, want not found", key, err)
	}
}

// nodeUpload is an Upload that stores what a node would (two own objects and
// one shared) and answers the artifacts; corrupt makes the answer's digest
// of the first object wrong.
func (h *harness) nodeUpload(corrupt bool) func(id string, req nodev1.UploadSnapshot) (*nodev1.Artifacts, error) {
	return func(id string, req nodev1.UploadSnapshot) (*nodev1.Artifacts, error) {
		objs := []nodev1.Object{
			h.putObject(req.Prefix+"memory.enc", "memory of "+id),
			h.putObject(req.Prefix+"disk.enc", "disk of "+id),
			h.putObject(req.SharedPrefix+"base-1", "shared base"),
		}
		if corrupt {
			objs[0].Digest = objstore.FormatDigest(make([]byte, 32))
		}
		return &nodev1.Artifacts{Export: json.RawMessage(`{"v":1}`), Objects: objs, PlainBytes: 300, StoredBytes: 200}, nil
	}
}

// TestHibernateRecordsUploadProgress: a node's readings of the upload become
// progress events, the first and the last (the ones between are within
// ProgressEvery), each with its reading.
func TestHibernateRecordsUploadProgress(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{ProgressEvery: time.Hour}, true)
	sb := h.newSandbox(sandbox.StateHibernating, "ns", nil)
	n := h.nodes["n1"]
	n.upload = h.nodeUpload(false)
	for _, done := range []int64{0, 100, 200, 300} {
		n.readings = append(n.readings, nodev1.Progress{Unit: "bytes", Done: done, Total: 300, Final: done == 300})
	}
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StateHibernated, sandbox.StateHibernated)
	evs, err := h.st.ListEvents(h.ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		if e.Type == "progress" {
			got = append(got, e.Message+" "+e.Progress)
		}
	}
	want := []string{
		`upload: 0 B of 300 B (0%) {"phase":"upload","done":0,"total":300,"unit":"bytes"}`,
		`upload: 300 B of 300 B (100%) {"phase":"upload","done":300,"total":300,"unit":"bytes","final":true}`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("progress events =\n%q\nwant\n%q", got, want)
	}
}

func TestHibernateMovesTheSandboxToObjectStorage(t *testing.T) {
	t.Parallel()
	for _, runtime := range []string{"vm", "ns"} {
		t.Run(runtime, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{}, true)
			sb := h.newSandbox(sandbox.StateHibernating, runtime, nil)
			n := h.nodes["n1"]
			n.upload = h.nodeUpload(false)
			if after := h.mustPass(sb.ID); after != 0 {
				t.Errorf("after = %v, want 0", after)
			}
			id := sandbox.LifecycleSnapshotID(sb.ID, "hibernate", sb.Generation)
			x := sb.ExecID
			wantCalls(t, n, "Pause("+x+")", "Snapshot("+x+")", "Upload("+id+")", "Stop("+x+")", "DeleteSnapshot("+id+")")
			kind := map[string]string{"vm": "full", "ns": "disk"}[runtime]
			if req := n.callsTo("Snapshot")[0].Body.(nodev1.TakeSnapshot); req != (nodev1.TakeSnapshot{SnapshotID: id, Kind: kind, LeavePaused: true}) {
				t.Errorf("Snapshot request = %+v, want %s %s leaving it paused", req, id, kind)
			}
			wantUp := nodev1.UploadSnapshot{
				Tenant: h.tenant, Prefix: "tenants/" + h.tenant + "/snapshots/" + id + "/",
				SharedPrefix: "tenants/" + h.tenant + "/shared/", KeyID: "key-" + h.tenant,
			}
			if req := n.callsTo("Upload")[0].Body.(nodev1.UploadSnapshot); req != wantUp {
				t.Errorf("Upload request = %+v, want %+v", req, wantUp)
			}
			got := h.wantState(sb.ID, sandbox.StateHibernated, sandbox.StateHibernated)
			if got.Node != "" || got.StartFrom != id || got.Reason != "" {
				t.Errorf("hibernated sandbox: node %q start from %q reason %q; want no node, %s, no reason", got.Node, got.StartFrom, got.Reason, id)
			}
			snap := h.getSnapshot(id)
			if snap.State != store.SnapshotReady || snap.Node != "" || snap.Tier != "hibernate" || string(snap.Kind) != kind {
				t.Errorf("hibernate snapshot = %+v, want ready %s of tier hibernate with no node", snap, kind)
			}
			var arts nodev1.Artifacts
			if err := json.Unmarshal([]byte(snap.Artifacts), &arts); err != nil {
				t.Fatalf("artifacts %q: %v", snap.Artifacts, err)
			}
			if len(arts.Objects) != 3 || arts.Objects[0].Key != wantUp.Prefix+"memory.enc" || arts.PlainBytes != 300 {
				t.Errorf("recorded artifacts = %+v", arts)
			}
			if n.holds(id) {
				t.Errorf("node n1 still holds %s", id)
			}
			h.wantEvent(sb.ID, "snapshot", "uploaded: 3 objects")
			h.wantEvent(sb.ID, "state", "hibernated: snapshot "+id)
			// Hibernated: nothing more to do.
			h.mustPass(sb.ID)
			if len(n.methods()) != 5 {
				t.Errorf("a pass over a hibernated sandbox called the node: %v", n.methods())
			}
		})
	}
}

func TestHibernateThenRestoreOnAnotherNode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, true)
	if err := h.st.CreateTemplate(h.ctx, store.Template{Name: "minimal", Source: "dir:/srv/minimal", State: store.TemplateReady}); err != nil {
		t.Fatal(err)
	}
	sb := h.newSandbox(sandbox.StateHibernating, "vm", nil)
	h.nodes["n1"].upload = h.nodeUpload(false)
	h.mustPass(sb.ID)
	id := sandbox.LifecycleSnapshotID(sb.ID, "hibernate", sb.Generation)
	arts := h.getSnapshot(id).Artifacts

	// Resume: a new execution, placed on n2.
	cur := h.get(sb.ID)
	if err := cur.Apply(sandbox.OpResume); err != nil {
		t.Fatal(err)
	}
	cur.Node = "n2"
	if err := h.st.UpdateSandbox(h.ctx, cur); err != nil {
		t.Fatal(err)
	}
	h.mustPass(sb.ID)
	got := h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	n2 := h.nodes["n2"]
	wantCalls(t, n2, "EnsureTemplate(minimal)", "Download("+id+")", "Start("+cur.ExecID+")")
	if src := n2.callsTo("EnsureTemplate")[0].Body; src != "dir:/srv/minimal" {
		t.Errorf("EnsureTemplate source = %v, want dir:/srv/minimal", src)
	}
	var want nodev1.Artifacts
	if err := json.Unmarshal([]byte(arts), &want); err != nil {
		t.Fatal(err)
	}
	dl := n2.callsTo("Download")[0].Body.(nodev1.DownloadSnapshot)
	if dl.Tenant != h.tenant || !reflect.DeepEqual(dl.Artifacts, want) {
		t.Errorf("Download request = %+v, want tenant %s and artifacts %+v", dl, h.tenant, want)
	}
	if req := n2.callsTo("Start")[0].Body.(nodev1.StartExecution); req.Snapshot != id || req.Generation != sb.Generation+1 {
		t.Errorf("Start from %q generation %d, want %s generation %d", req.Snapshot, req.Generation, id, sb.Generation+1)
	}
	if got.Node != "n2" || got.Generation != sb.Generation+1 {
		t.Errorf("running on %s generation %d, want n2 generation %d", got.Node, got.Generation, sb.Generation+1)
	}
	if snap := h.getSnapshot(id); snap.Node != "n2" || snap.Artifacts != arts {
		t.Errorf("snapshot after download: node %q, artifacts kept %v; want n2, kept", snap.Node, snap.Artifacts == arts)
	}
	h.wantEvent(sb.ID, "snapshot", "downloaded to n2")
}

// restoring stores a sandbox restoring on n2 from a hibernate snapshot
// that lives only in object storage.
func (h *harness) restoring(edit func(s *store.Snapshot)) (*sandbox.Sandbox, store.Snapshot) {
	h.t.Helper()
	sb := h.newSandbox(sandbox.StateRestoring, "vm", func(sb *sandbox.Sandbox) { sb.Node = "n2" })
	snap := h.snapshot(sb, func(s *store.Snapshot) {
		s.ID, s.Tier, s.Node, s.Kind = sandbox.LifecycleSnapshotID(sb.ID, "hibernate", sb.Generation-1), "hibernate", "", store.SnapshotFull
		if edit != nil {
			edit(s)
		}
	})
	if snap.Node == "" {
		h.setArtifacts(snap.ID, h.uploaded(snap, "memory.enc"))
	}
	sb.StartFrom = snap.ID
	if err := h.st.UpdateSandbox(h.ctx, sb); err != nil {
		h.t.Fatal(err)
	}
	return sb, h.getSnapshot(snap.ID)
}

func TestRestoreRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		edit     func(s *store.Snapshot)
		err      error
		backdate time.Duration
		state    sandbox.State
		reason   string
	}{
		{name: "download refused", err: errdefs.ErrFailedPrecondition, state: sandbox.StateHibernated, reason: "restore refused: snapshot "},
		{name: "download unavailable too long", err: errdefs.ErrUnavailable, backdate: 10 * time.Minute, state: sandbox.StateHibernated, reason: "restore refused"},
		{
			name: "a manual snapshot that does not download", edit: func(s *store.Snapshot) { s.Tier = "manual" },
			err: errdefs.ErrFailedPrecondition, state: sandbox.StateFailed, reason: "restore refused",
		},
		{
			name: "on another node, not in object storage", edit: func(s *store.Snapshot) { s.Node = "n1" },
			state: sandbox.StateFailed, reason: "is on node n1 and not in object storage",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{}, true)
			sb, snap := h.restoring(tc.edit)
			n2 := h.nodes["n2"]
			if tc.err != nil {
				n2.failAlways("Download", tc.err)
			}
			if tc.backdate > 0 {
				h.st.backdate(sb.ID, tc.backdate)
			}
			h.mustPass(sb.ID)
			got := h.wantState(sb.ID, tc.state, tc.state)
			wantReason(t, got, tc.reason)
			if starts := n2.callsTo("Start"); len(starts) != 0 {
				t.Errorf("Start called %v", starts)
			}
			if tc.state == sandbox.StateHibernated {
				if got.Node != "" || got.StartFrom != snap.ID {
					t.Errorf("hibernated again: node %q start from %q; want none, %s", got.Node, got.StartFrom, snap.ID)
				}
				h.wantEvent(sb.ID, "refused", "restore refused")
				if after := h.getSnapshot(snap.ID); after.Artifacts != snap.Artifacts || after.Node != "" {
					t.Errorf("the snapshot changed: %+v", after)
				}
			}
		})
	}
}

func TestRestoreRetriesAnUnavailableDownload(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, true)
	sb, snap := h.restoring(nil)
	h.nodes["n2"].failNext("Download", 1, errdefs.ErrUnavailable)
	after, err := h.pass(sb.ID)
	if !errdefs.IsUnavailable(err) || after <= 0 {
		t.Fatalf("pass = %v, %v; want a requeue with unavailable", after, err)
	}
	h.wantState(sb.ID, sandbox.StateRestoring, sandbox.StateRunning)
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	wantCalls(t, h.nodes["n2"], "Download("+snap.ID+")", "Download("+snap.ID+")", "Start("+sb.ExecID+")")
}

func TestRestoreFromAMissingSnapshotFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, true)
	sb := h.newSandbox(sandbox.StateRestoring, "ns", func(sb *sandbox.Sandbox) { sb.StartFrom = "sn-gone0000000000000" })
	h.mustPass(sb.ID)
	got := h.wantState(sb.ID, sandbox.StateFailed, sandbox.StateFailed)
	wantReason(t, got, "snapshot sn-gone0000000000000 to start from is gone")
}

func TestRollbackStopsTheReplacedExecution(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	sb := h.newSandbox(sandbox.StateRunning, "ns", nil)
	snap := h.snapshot(sb, nil)
	old := exec(sb, nodev1.ExecRunning)
	neighbour := nodev1.Execution{ExecID: "cccccccccccccccccccc-g1-dddddddd", SandboxID: "cccccccccccccccccccc", State: nodev1.ExecRunning, StartedAt: time.Now()}
	// Rollback: a new execution from the snapshot, on the same node.
	if err := sb.Apply(sandbox.OpRollback); err != nil {
		t.Fatal(err)
	}
	sb.Node, sb.StartFrom = "n1", snap.ID
	if err := h.st.UpdateSandbox(h.ctx, sb); err != nil {
		t.Fatal(err)
	}
	h.observe("n1", old, neighbour)
	h.mustPass(sb.ID)
	got := h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	n := h.nodes["n1"]
	wantCalls(t, n, "Stop("+old.ExecID+")", "Start("+sb.ExecID+")")
	if req := n.callsTo("Start")[0].Body.(nodev1.StartExecution); req.Snapshot != snap.ID {
		t.Errorf("Start from %q, want %s", req.Snapshot, snap.ID)
	}
	if got.ExecID == old.ExecID {
		t.Errorf("exec id not renewed")
	}
	h.wantEvent(sb.ID, "state", "replaced execution "+old.ExecID+" stopped")

	// A replaced execution that cannot be stopped holds the start back.
	h2 := newHarness(t, Config{}, false)
	sb2 := h2.newSandbox(sandbox.StateRunning, "ns", nil)
	snap2 := h2.snapshot(sb2, nil)
	old2 := exec(sb2, nodev1.ExecRunning)
	if err := sb2.Apply(sandbox.OpRollback); err != nil {
		t.Fatal(err)
	}
	sb2.Node, sb2.StartFrom = "n1", snap2.ID
	if err := h2.st.UpdateSandbox(h2.ctx, sb2); err != nil {
		t.Fatal(err)
	}
	h2.observe("n1", old2)
	h2.nodes["n1"].failNext("Stop", 1, errdefs.ErrUnavailable)
	if after, err := h2.pass(sb2.ID); err == nil || after <= 0 {
		t.Fatalf("pass = %v, %v; want a requeue with the stop error", after, err)
	}
	wantCalls(t, h2.nodes["n1"], "Stop("+old2.ExecID+")")
	h2.wantState(sb2.ID, sandbox.StateRestoring, sandbox.StateRunning)
}

func TestHibernateUploadUnavailableRetriesThenRefuses(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{UploadRetry: time.Minute}, true)
	sb := h.newSandbox(sandbox.StateHibernating, "vm", nil)
	n := h.nodes["n1"]
	n.upload = h.nodeUpload(false)
	n.failAlways("Upload", errdefs.ErrUnavailable)
	id := sandbox.LifecycleSnapshotID(sb.ID, "hibernate", sb.Generation)
	x := sb.ExecID
	for i := range 2 {
		after, err := h.pass(sb.ID)
		if !errdefs.IsUnavailable(err) || after <= 0 {
			t.Fatalf("pass %d = %v, %v; want a requeue with unavailable", i, after, err)
		}
		h.wantState(sb.ID, sandbox.StateHibernating, sandbox.StateHibernated)
	}
	// The snapshot was taken once; only the upload is retried.
	wantCalls(t, n, "Pause("+x+")", "Snapshot("+x+")", "Upload("+id+")", "Upload("+id+")")

	h.st.backdate(sb.ID, 2*time.Minute)
	h.mustPass(sb.ID)
	got := h.wantState(sb.ID, sandbox.StatePaused, sandbox.StatePaused)
	wantReason(t, got, "hibernate failed: upload")
	if got.Node != "n1" || got.ExecID != x {
		t.Errorf("refused: node %q exec %s; want it kept paused on n1 as %s", got.Node, got.ExecID, x)
	}
	h.wantEvent(sb.ID, "refused", "stays paused on n1")
	// The refused hibernation's snapshot is removed: a later one of this
	// generation takes its own.
	wantCalls(t, n, "Pause("+x+")", "Snapshot("+x+")", "Upload("+id+")", "Upload("+id+")", "Upload("+id+")", "Pause("+x+")", "DeleteSnapshot("+id+")")
	if _, err := h.st.GetSnapshot(context.Background(), "", id); !errdefs.IsNotFound(err) {
		t.Errorf("the refused hibernation's snapshot row is still there: %v", err)
	}
}

func TestHibernateRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		noStore bool
		upload  func(h *harness) func(string, nodev1.UploadSnapshot) (*nodev1.Artifacts, error)
		reason  string
		calls   int // node calls before the refusal's Pause
	}{
		{name: "no object store", noStore: true, reason: "no object store is configured"},
		{name: "wrong digest", upload: func(h *harness) func(string, nodev1.UploadSnapshot) (*nodev1.Artifacts, error) {
			return h.nodeUpload(true)
		}, reason: "verify tenants/", calls: 3},
		{name: "object missing", upload: func(h *harness) func(string, nodev1.UploadSnapshot) (*nodev1.Artifacts, error) {
			up := h.nodeUpload(false)
			return func(id string, req nodev1.UploadSnapshot) (*nodev1.Artifacts, error) {
				arts, err := up(id, req)
				if err == nil {
					arts.Objects = append(arts.Objects, nodev1.Object{Key: req.Prefix + "never-written", Size: 1, Digest: arts.Objects[0].Digest})
				}
				return arts, err
			}
		}, reason: "never-written", calls: 3},
		{name: "upload refused", upload: func(h *harness) func(string, nodev1.UploadSnapshot) (*nodev1.Artifacts, error) {
			return func(string, nodev1.UploadSnapshot) (*nodev1.Artifacts, error) {
				return nil, errors.Join(errors.New("tenant key revoked"), errdefs.ErrPermissionDenied)
			}
		}, reason: "tenant key revoked", calls: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{}, !tc.noStore)
			sb := h.newSandbox(sandbox.StateHibernating, "vm", nil)
			n := h.nodes["n1"]
			if tc.upload != nil {
				n.upload = tc.upload(h)
			}
			h.mustPass(sb.ID)
			got := h.wantState(sb.ID, sandbox.StatePaused, sandbox.StatePaused)
			wantReason(t, got, "hibernate failed", tc.reason)
			h.wantEvent(sb.ID, "refused", tc.reason)
			calls := n.methods()
			if tc.calls > 1 {
				// A snapshot was taken: the refusal removes it after the pause.
				if len(calls) != tc.calls+2 || calls[len(calls)-2] != "Pause("+sb.ExecID+")" || !strings.HasPrefix(calls[len(calls)-1], "DeleteSnapshot(") {
					t.Errorf("node calls = %v, want %d then a Pause and a DeleteSnapshot", calls, tc.calls)
				}
			} else if len(calls) != tc.calls+1 || calls[len(calls)-1] != "Pause("+sb.ExecID+")" {
				t.Errorf("node calls = %v, want %d then a Pause", calls, tc.calls)
			}
			if stops := n.callsTo("Stop"); len(stops) != 0 {
				t.Errorf("a refused hibernation stopped the execution: %v", stops)
			}
		})
	}
}

func TestHibernateVerifyWaitsForTheObjectStore(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{UploadRetry: time.Minute}, true)
	faulty := objstoretest.NewFaulty(h.objs)
	h.r.cfg.Objects = faulty
	sb := h.newSandbox(sandbox.StateHibernating, "vm", nil)
	h.nodes["n1"].upload = h.nodeUpload(false)
	faulty.SetDown(true)
	after, err := h.pass(sb.ID)
	if !errdefs.IsUnavailable(err) || after <= 0 {
		t.Fatalf("pass = %v, %v; want a requeue with unavailable", after, err)
	}
	h.wantState(sb.ID, sandbox.StateHibernating, sandbox.StateHibernated)
	faulty.SetDown(false)
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StateHibernated, sandbox.StateHibernated)
}

// A refused hibernation leaves its snapshot row (ready, on the node) behind.
// If the sandbox is resumed, runs on and is hibernated again in the same
// generation (pause and resume keep the execution), the second hibernation
// must take a new snapshot: the old one misses everything written since.
func TestHibernateAfterARefusalTakesAFreshSnapshot(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, true)
	sb := h.newSandbox(sandbox.StateHibernating, "vm", nil)
	n := h.nodes["n1"]
	n.upload = h.nodeUpload(false)
	n.failNext("Upload", 1, errdefs.ErrFailedPrecondition)
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StatePaused, sandbox.StatePaused)
	// Resume, run, hibernate again.
	for _, op := range []sandbox.Op{sandbox.OpResume, sandbox.OpHibernate} {
		cur := h.get(sb.ID)
		if err := cur.Apply(op); err != nil {
			t.Fatal(err)
		}
		if err := h.st.UpdateSandbox(h.ctx, cur); err != nil {
			t.Fatal(err)
		}
		h.mustPass(sb.ID)
	}
	h.wantState(sb.ID, sandbox.StateHibernated, sandbox.StateHibernated)
	if snaps := n.callsTo("Snapshot"); len(snaps) != 2 {
		t.Fatalf("Snapshot called %d times, want 2: the second hibernation uploaded the snapshot of the first", len(snaps))
	}
}

// deleteNow applies delete to sandbox id and runs the delete pass.
func (h *harness) deleteNow(id string) {
	h.t.Helper()
	cur := h.get(id)
	if err := cur.Apply(sandbox.OpDelete); err != nil {
		h.t.Fatal(err)
	}
	if err := h.st.UpdateSandbox(h.ctx, cur); err != nil {
		h.t.Fatal(err)
	}
	h.mustPass(id)
	if _, err := h.st.GetSandboxByID(h.ctx, id); !errdefs.IsNotFound(err) {
		h.t.Fatalf("sandbox %s after the delete pass: err = %v, want not found", id, err)
	}
}

// What a refused hibernation had uploaded is the sandbox's too: deleting
// the sandbox must not leave it in object storage.
func TestDeleteAfterARefusedUploadLeavesNoObjects(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, true)
	sb := h.newSandbox(sandbox.StateHibernating, "vm", nil)
	h.nodes["n1"].upload = h.nodeUpload(true)
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StatePaused, sandbox.StatePaused)
	id := sandbox.LifecycleSnapshotID(sb.ID, "hibernate", sb.Generation)
	h.deleteNow(sb.ID)
	left, err := h.objs.List(h.ctx, snapshotPrefix(h.tenant, id))
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("objects of the deleted sandbox left in the store: %v", left)
	}
}

// A snapshot both on a node and in object storage (a hibernate snapshot
// restored once) that is restored again on another node must not leave its
// first node-local copy behind for good.
func TestRestoreOnAThirdNodeDoesNotOrphanTheNodeCopy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, true)
	sb, snap := h.restoring(nil)
	// The snapshot was restored on n1 before: n1 holds it and the row says so.
	snap.Node = "n1"
	if err := h.st.UpdateSnapshot(h.ctx, snap); err != nil {
		t.Fatal(err)
	}
	h.nodes["n1"].snapshots[snap.ID] = true
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	h.deleteNow(sb.ID)
	for _, n := range h.nodes {
		if n.holds(snap.ID) {
			t.Errorf("node %s still holds %s after its sandbox was deleted", n.id, snap.ID)
		}
	}
}

// lyingLister is an object store whose listings are what the test says:
// truncated (nothing) or with keys from elsewhere.
type lyingLister struct {
	objstore.Store
	list func(prefix string) []objstore.Info
}

func (l lyingLister) List(_ context.Context, prefix string) ([]objstore.Info, error) {
	return l.list(prefix), nil
}

// TestDeleteObjectsByKey: a snapshot's objects are deleted by their keys —
// the recorded ones even when the store's listing leaves them out, and
// never a key the listing answers from outside the snapshot's own prefix
// (another snapshot's, the tenant's shared objects).
func TestDeleteObjectsByKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, true)
	sb := h.newSandbox(sandbox.StateRunning, "vm", nil)
	mine := h.snapshot(sb, func(s *store.Snapshot) { s.Node, s.Tier = "", "hibernate" })
	theirs := h.snapshot(sb, func(s *store.Snapshot) { s.Node, s.Tier = "", "hibernate" })
	shared := h.putObject(sharedPrefix(h.tenant)+"base-0001", "base stream")
	own := h.uploaded(mine, "memory", "disk")
	unrecorded := h.uploaded(mine, "left-by-a-refused-upload")
	other := h.uploaded(theirs, "memory")
	h.setArtifacts(mine.ID, append(slices.Clone(own), shared))
	h.setArtifacts(theirs.ID, append(slices.Clone(other), shared))

	var listed []objstore.Info
	for _, o := range append(append(other, shared), unrecorded...) {
		listed = append(listed, objstore.Info{Key: o.Key, Size: o.Size})
	}
	h.r.cfg.Objects = lyingLister{Store: h.objs, list: func(string) []objstore.Info { return listed }}
	if err := h.r.deleteObjects(h.ctx, h.getSnapshot(mine.ID)); err != nil {
		t.Fatalf("delete objects: %v", err)
	}
	for _, o := range append(own, unrecorded...) {
		h.wantObject(o.Key, false)
	}
	for _, o := range append(other, shared) {
		h.wantObject(o.Key, true)
	}
}
