package restapi

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
)

// The lifecycle verbs answer once the sandbox has settled: 200 with it,
// 202 with its transitional state when that takes too long
// (service.ErrStillWorking), 409 naming the current state for an illegal
// transition.

// handleLifecycle applies op (pause, resume, stop, hibernate) to the
// sandbox.
func (a *API) handleLifecycle(op sandbox.Op) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sb, err := a.svc.Lifecycle(r.Context(), a.caller(r), r.PathValue("id"), op)
		a.answerLifecycle(w, r, sb, err)
	}
}

// answerLifecycle answers the outcome of a lifecycle verb.
func (a *API) answerLifecycle(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox, err error) {
	switch {
	case errors.Is(err, service.ErrStillWorking):
		writeJSON(w, http.StatusAccepted, a.apiOf(sb))
	case err != nil:
		a.writeError(w, r, err)
	default:
		writeJSON(w, http.StatusOK, a.apiOf(sb))
	}
}

// handleRestore brings a hibernated sandbox back from object storage, on
// the node the scheduler picks or, for an admin, on the node the body names
// (to move a sandbox, or to measure a restore on another node).
func (a *API) handleRestore(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.RestoreRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &req); err != nil {
			a.writeError(w, r, err)
			return
		}
	}
	c, id := a.caller(r), r.PathValue("id")
	if req.Node == "" {
		sb, err := a.svc.Lifecycle(r.Context(), c, id, sandbox.OpRestore)
		a.answerLifecycle(w, r, sb, err)
		return
	}
	if !c.Admin {
		a.writeError(w, r, fmt.Errorf("%w: choosing the node of a restore needs an admin key", errdefs.ErrPermissionDenied))
		return
	}
	if !service.ValidNodeID(req.Node) {
		a.writeError(w, r, fmt.Errorf("%w: node %q: want 1-63 of [a-z0-9-]", errdefs.ErrInvalidArgument, clip(req.Node)))
		return
	}
	sb, err := a.svc.RestoreOn(r.Context(), c, id, req.Node)
	a.answerLifecycle(w, r, sb, err)
}

// handleStart boots a stopped sandbox from the disk its stop kept, on the
// node that holds it.
func (a *API) handleStart(w http.ResponseWriter, r *http.Request) {
	sb, err := a.svc.Start(r.Context(), a.caller(r), r.PathValue("id"))
	a.answerLifecycle(w, r, sb, err)
}

// handleRollback puts the sandbox's filesystem back to one of its snapshots:
// a new execution from it replaces the current one.
func (a *API) handleRollback(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.RollbackRequest
	if err := decodeJSON(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	sb, err := a.svc.Rollback(r.Context(), a.caller(r), r.PathValue("id"), req.Snapshot)
	a.answerLifecycle(w, r, sb, err)
}

// handleSetTimeout sets how long the sandbox lives from now ("0": no
// timeout).
func (a *API) handleSetTimeout(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.SetTimeoutRequest
	if err := decodeJSON(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	d, err := parseTimeout(req.Timeout)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	sb, err := a.svc.SetTimeout(r.Context(), a.caller(r), r.PathValue("id"), d)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a.apiOf(sb))
}

// parseTimeout reads a timeout as the API sends it: a duration, or "0" for
// none.
func parseTimeout(text string) (time.Duration, error) {
	if text == "0" {
		return 0, nil
	}
	d, err := sandbox.ParseTimeout(text)
	if err == nil && d == 0 {
		err = fmt.Errorf("%w: timeout is required (\"0\" removes it)", errdefs.ErrInvalidArgument)
	}
	return d, err
}
