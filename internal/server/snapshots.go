package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// apiSnapshot is a snapshot as the REST API reports it.
func apiSnapshot(snap store.Snapshot) sandboxv1.Snapshot {
	return sandboxv1.Snapshot{
		ID: snap.ID, Sandbox: snap.SandboxID, Kind: string(snap.Kind), Tier: snap.Tier, State: string(snap.State),
		Reason: snap.Reason, SizeBytes: snap.SizeBytes, CreatedAt: snap.CreatedAt,
	}
}

func (s *Server) handleListSnapshots(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandboxFor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	snaps, err := s.store.ListSnapshots(r.Context(), store.SnapshotFilter{SandboxID: sb.ID, Tenant: sb.Tenant})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := sandboxv1.SnapshotList{Snapshots: []sandboxv1.Snapshot{}}
	for _, snap := range snaps {
		out.Snapshots = append(out.Snapshots, apiSnapshot(snap))
	}
	writeJSON(w, http.StatusOK, out)
}

// handleCreateSnapshot takes a snapshot of a running or paused sandbox and
// answers it once it is ready (201), failed (409 with the reason) or still
// being taken after the wait (202).
func (s *Server) handleCreateSnapshot(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.CreateSnapshotRequest
	if err := decodeOptionalJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, err := s.sandboxFor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	kind := store.SnapshotKind(req.Kind)
	if kind == "" {
		kind = store.SnapshotDisk
	}
	snap, err := s.snapshot(r.Context(), sb, kind, "manual")
	switch {
	case errors.Is(err, errStillWorking):
		writeJSON(w, http.StatusAccepted, apiSnapshot(snap))
	case err != nil:
		s.writeError(w, r, err)
	default:
		writeJSON(w, http.StatusCreated, apiSnapshot(snap))
	}
}

// snapshot records a new snapshot of sb for the reconciler to take and waits
// for the outcome: the ready snapshot, an error with the reason it failed,
// or errStillWorking with the snapshot still being taken.
func (s *Server) snapshot(ctx context.Context, sb *sandbox.Sandbox, kind store.SnapshotKind, tier string) (store.Snapshot, error) {
	if kind != store.SnapshotDisk && kind != store.SnapshotFull {
		return store.Snapshot{}, fmt.Errorf("%w: snapshot kind %q: want disk or full", errdefs.ErrInvalidArgument, clip(string(kind)))
	}
	if kind == store.SnapshotFull && sb.Runtime != "vm" {
		return store.Snapshot{}, fmt.Errorf("%w: the %s runtime cannot save memory (it shares the host kernel): take a disk snapshot", errdefs.ErrFailedPrecondition, sb.Runtime)
	}
	if sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused {
		return store.Snapshot{}, fmt.Errorf("%w: cannot snapshot a sandbox that is %s (it must be running or paused)", errdefs.ErrConflict, sb.State)
	}
	snap := store.Snapshot{
		ID: sandbox.NewSnapshotID(), SandboxID: sb.ID, Tenant: sb.Tenant, Kind: kind, Tier: tier,
		State: store.SnapshotCreating, Node: sb.Node, Runtime: sb.Runtime, Template: sb.Template,
		CPUs: sb.CPUs, MemoryMiB: sb.MemoryMiB, Generation: sb.Generation, CreatedAt: time.Now().UTC(),
	}
	wait := s.rec.Watch(sb.ID)
	defer wait.Stop()
	if err := s.store.CreateSnapshot(ctx, snap); err != nil {
		return snap, err
	}
	s.rec.Enqueue(sb.ID)
	ctx, cancel := context.WithTimeout(ctx, lifecycleWait)
	defer cancel()
	for {
		cur, err := s.store.GetSnapshot(ctx, sb.Tenant, snap.ID)
		if err != nil {
			return snap, err
		}
		switch cur.State {
		case store.SnapshotReady:
			return cur, nil
		case store.SnapshotFailed:
			return cur, fmt.Errorf("%w: snapshot %s failed: %s", errdefs.ErrFailedPrecondition, cur.ID, cur.Reason)
		}
		select {
		case <-wait.C:
		case <-ctx.Done():
			return cur, errStillWorking
		}
	}
}

// handleFork starts a new sandbox from one of the sandbox's snapshots, or
// from a snapshot taken now (full for vm: the fork continues the parent's
// processes; disk for ns). The parent keeps running. The fork is placed on
// the node that holds the snapshot and gets its own identity.
func (s *Server) handleFork(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.ForkRequest
	if err := decodeOptionalJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := sandbox.ValidateName(req.Name); err != nil {
		s.writeError(w, r, err)
		return
	}
	parent, err := s.sandboxFor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// With an Idempotency-Key the child's id is derived from the parent and
	// the key (as a create's is): a retry after a server died mid-fork
	// finds the child the first attempt recorded instead of forking again.
	var childID string
	if key := idempotencyKeyOf(r.Context()); key != "" {
		childID = sandbox.DerivedID("fork", parent.Tenant, parent.ID, key)
		if prev, err := s.store.GetSandboxByID(r.Context(), childID); err == nil {
			s.answerEarlierFork(w, r, prev, req)
			return
		}
	}
	// Refuse before taking a snapshot the fork could not run from.
	if err := s.quotaCheck(r.Context(), parent.Tenant, store.UsageOf(parent)); err != nil {
		s.writeError(w, r, err)
		return
	}
	var snap store.Snapshot
	if req.Snapshot != "" {
		snap, err = s.snapshotOf(r.Context(), parent, req.Snapshot)
	} else {
		kind := store.SnapshotDisk
		if parent.Runtime == "vm" {
			kind = store.SnapshotFull
		}
		snap, err = s.snapshot(r.Context(), parent, kind, "fork")
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	child := sandbox.New(parent.Tenant, sandbox.Spec{
		Name: req.Name, Template: parent.Template, Runtime: parent.Runtime, CPUs: parent.CPUs,
		MemoryMiB: parent.MemoryMiB, DiskMiB: parent.DiskMiB, Env: parent.Env, Metadata: parent.Metadata,
		// The fork inherits the parent's policy, as its own from now on.
		Egress:  parent.EgressOr(s.cfg.DefaultEgress),
		Project: parent.Project,
	}, time.Now())
	// The fork is another sandbox: it trusts a CA of its own, never its
	// parent's (whose key would let one mint certificates the other trusts).
	if err := s.newCA(child); err != nil {
		s.writeError(w, r, err)
		return
	}
	if childID != "" {
		child.SetID(childID)
	}
	if !parent.ExpiresAt.IsZero() {
		child.ExpiresAt = child.CreatedAt.Add(parent.ExpiresAt.Sub(parent.CreatedAt))
	}
	if err := s.startFrom(child, snap); err != nil {
		s.writeError(w, r, err)
		return
	}
	if snap.Kind == store.SnapshotFull {
		// A full snapshot restores only at the size it was taken.
		child.CPUs, child.MemoryMiB = snap.CPUs, snap.MemoryMiB
	}
	wait := s.rec.Watch(child.ID)
	defer wait.Stop()
	if err := s.store.CreateSandboxWithinQuota(r.Context(), child); err != nil {
		if childID != "" && errors.Is(err, errdefs.ErrConflict) {
			// Another attempt with this key recorded it meanwhile (the
			// snapshot this one took stays with the parent).
			if prev, gerr := s.store.GetSandboxByID(r.Context(), childID); gerr == nil {
				s.answerEarlierFork(w, r, prev, req)
				return
			}
		}
		s.writeError(w, r, err)
		return
	}
	s.event(r.Context(), child.ID, "scheduled", fmt.Sprintf("fork of %s from snapshot %s on %s", parent.ID, snap.ID, snap.Node))
	s.event(r.Context(), parent.ID, "fork", fmt.Sprintf("forked into %s from snapshot %s", child.ID, snap.ID))
	s.rec.Enqueue(child.ID)
	s.answerFork(w, r, child, wait)
}

// answerEarlierFork answers a fork retried with the Idempotency-Key of an
// earlier attempt that recorded the child and did not answer: with that
// child once it settles, if the retry asks for the same fork.
func (s *Server) answerEarlierFork(w http.ResponseWriter, r *http.Request, prev *sandbox.Sandbox, req sandboxv1.ForkRequest) {
	if prev.Name != req.Name {
		s.writeError(w, r, fmt.Errorf("%w: Idempotency-Key was used for another request", errdefs.ErrConflict))
		return
	}
	wait := s.rec.Watch(prev.ID)
	defer wait.Stop()
	s.rec.Enqueue(prev.ID)
	s.answerFork(w, r, prev, wait)
}

// answerFork waits for a new fork to settle and answers with it.
func (s *Server) answerFork(w http.ResponseWriter, r *http.Request, child *sandbox.Sandbox, wait *reconcile.Watch) {
	child, err := s.waitSettled(r.Context(), child, wait)
	switch {
	case errors.Is(err, errStillWorking):
		writeJSON(w, http.StatusAccepted, s.apiOf(child))
	case err != nil:
		s.writeError(w, r, err)
	case child.State == sandbox.StateFailed:
		s.writeError(w, r, fmt.Errorf("%w: fork %s failed to start: %s", errdefs.ErrFailedPrecondition, child.ID, child.Reason))
	default:
		writeJSON(w, http.StatusCreated, s.apiOf(child))
	}
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandboxFor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	events, err := s.store.ListEvents(r.Context(), sb.ID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := sandboxv1.EventList{Events: []sandboxv1.Event{}}
	for _, e := range events {
		out.Events = append(out.Events, sandboxv1.Event{Seq: e.Seq, Time: e.Time, Type: e.Type, Message: e.Message, Progress: progressAPI(e.Progress)})
	}
	writeJSON(w, http.StatusOK, out)
}

// decodeOptionalJSON decodes a body that may be absent (then v is left as
// it is).
func decodeOptionalJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	return decodeJSON(w, r, v)
}

// handleDeleteSnapshot deletes one of the sandbox's snapshots: its copy on
// the node, its objects and its record. The snapshot the sandbox's current
// execution started from, or will start from (a stopped or hibernated
// sandbox's disk), and one still being taken, are refused with 409.
func (s *Server) handleDeleteSnapshot(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandboxFor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id := r.PathValue("snapshot")
	notFound := fmt.Errorf("%w: snapshot %q of sandbox %s", errdefs.ErrNotFound, clip(id), sb.ID)
	if !sandbox.ValidSnapshotID(id) {
		s.writeError(w, r, notFound)
		return
	}
	snap, err := s.store.GetSnapshot(r.Context(), sb.Tenant, id)
	if errors.Is(err, errdefs.ErrNotFound) || err == nil && snap.SandboxID != sb.ID {
		s.writeError(w, r, notFound)
		return
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	switch {
	case snap.ID == sb.StartFrom:
		s.writeError(w, r, fmt.Errorf("%w: snapshot %s is what the sandbox (%s) runs or starts from; it goes with the sandbox", errdefs.ErrConflict, id, sb.State))
		return
	case snap.State == store.SnapshotCreating:
		s.writeError(w, r, fmt.Errorf("%w: snapshot %s is still being taken", errdefs.ErrConflict, id))
		return
	}
	wait := s.rec.Watch(sb.ID)
	defer wait.Stop()
	if snap.State != store.SnapshotDeleting {
		snap.State = store.SnapshotDeleting
		if err := s.store.UpdateSnapshot(r.Context(), snap); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	s.rec.Enqueue(sb.ID)
	ctx, cancel := context.WithTimeout(r.Context(), lifecycleWait)
	defer cancel()
	for {
		if _, err := s.store.GetSnapshot(ctx, sb.Tenant, id); errors.Is(err, errdefs.ErrNotFound) {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		select {
		case <-wait.C:
		case <-ctx.Done():
			w.WriteHeader(http.StatusAccepted)
			return
		}
	}
}
