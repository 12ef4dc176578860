package restapi

import (
	"errors"
	"fmt"
	"net/http"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// apiSnapshot is a snapshot as the REST API reports it.
func apiSnapshot(snap store.Snapshot) sandboxv1.Snapshot {
	return sandboxv1.Snapshot{
		ID: snap.ID, Sandbox: snap.SandboxID, Kind: string(snap.Kind), Tier: snap.Tier, State: string(snap.State),
		Reason: snap.Reason, SizeBytes: snap.SizeBytes, CreatedAt: snap.CreatedAt,
	}
}

// named is s with name among its names, when name is set.
func named(s sandboxv1.Snapshot, name string) sandboxv1.Snapshot {
	if name != "" {
		s.Names = []string{name}
	}
	return s
}

func (a *API) handleListSnapshots(w http.ResponseWriter, r *http.Request) {
	snaps, err := a.svc.ListSnapshots(r.Context(), a.caller(r), r.PathValue("id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	names, err := a.svc.SnapshotNames(r.Context(), a.caller(r))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := sandboxv1.SnapshotList{Snapshots: []sandboxv1.Snapshot{}}
	for _, snap := range snaps {
		s := apiSnapshot(snap)
		s.Names = names[snap.ID]
		out.Snapshots = append(out.Snapshots, s)
	}
	writeJSON(w, http.StatusOK, out)
}

// handleCreateSnapshot takes a snapshot of a running or paused sandbox and
// answers it once it is ready (201), failed (409 with the reason) or still
// being taken after the wait (202). With an Idempotency-Key the snapshot's
// id is derived from the sandbox and the key, so a retry never takes a
// second one.
func (a *API) handleCreateSnapshot(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.CreateSnapshotRequest
	if err := decodeOptionalJSON(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	// A name is checked before the snapshot is taken, given once it is
	// recorded (ready or still being taken).
	if req.Name != "" {
		if err := a.svc.CheckSnapshotName(r.Context(), req.Name); err != nil {
			a.writeError(w, r, err)
			return
		}
	}
	snap, err := a.svc.TakeSnapshotWithKey(r.Context(), a.caller(r), r.PathValue("id"), store.SnapshotKind(req.Kind), service.TierManual, idempotencyKeyOf(r.Context()))
	if req.Name != "" && (err == nil || errors.Is(err, service.ErrStillWorking)) {
		if nerr := a.svc.NameSnapshot(r.Context(), a.caller(r), snap.ID, req.Name); nerr != nil {
			a.writeError(w, r, fmt.Errorf("snapshot %s taken, not named %s: %w", snap.ID, req.Name, nerr))
			return
		}
	}
	switch {
	case errors.Is(err, service.ErrStillWorking):
		writeJSON(w, http.StatusAccepted, named(apiSnapshot(snap), req.Name))
	case err != nil:
		a.writeError(w, r, err)
	default:
		writeJSON(w, http.StatusCreated, named(apiSnapshot(snap), req.Name))
	}
}

// handleFork starts a new sandbox from one of the sandbox's snapshots, or
// from a snapshot taken now (service.Sandboxes.Fork): 201 with the child
// once it runs, 202 while it is still starting. With an Idempotency-Key
// the child's id is derived from the parent and the key.
func (a *API) handleFork(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.ForkRequest
	if err := decodeOptionalJSON(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	child, err := a.svc.Fork(r.Context(), a.caller(r), r.PathValue("id"), service.ForkParams{
		Name: req.Name, Snapshot: req.Snapshot, Key: idempotencyKeyOf(r.Context()),
	})
	switch {
	case errors.Is(err, service.ErrStillWorking):
		writeJSON(w, http.StatusAccepted, a.apiOf(child))
	case err != nil:
		a.writeError(w, r, err)
	default:
		writeJSON(w, http.StatusCreated, a.apiOf(child))
	}
}

func (a *API) handleEvents(w http.ResponseWriter, r *http.Request) {
	events, err := a.svc.Events(r.Context(), a.caller(r), r.PathValue("id"))
	if err != nil {
		a.writeError(w, r, err)
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
// the node, its objects and its record (204; 202 while that goes on). The
// snapshot the sandbox's current execution started from, or will start
// from (a stopped or hibernated sandbox's disk), and one still being taken,
// are refused with 409.
func (a *API) handleDeleteSnapshot(w http.ResponseWriter, r *http.Request) {
	err := a.svc.DeleteSnapshot(r.Context(), a.caller(r), r.PathValue("id"), r.PathValue("snapshot"))
	switch {
	case errors.Is(err, service.ErrStillWorking):
		w.WriteHeader(http.StatusAccepted)
	case err != nil:
		a.writeError(w, r, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
