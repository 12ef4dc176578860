package restapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
)

// createRequest is the body of POST /v1/sandboxes as the server reads it:
// the egress policy stays raw, for egress.ParsePolicy to judge (the outer
// field wins over the embedded one of the same JSON name).
type createRequest struct {
	sandboxv1.CreateSandboxRequest
	Egress json.RawMessage `json:"egress,omitempty"`
}

func (a *API) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if err := decodeJSON(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	start := time.Now()
	sb, err := a.svc.Create(r.Context(), a.caller(r), service.CreateParams{
		CreateSandboxRequest: req.CreateSandboxRequest, Egress: req.Egress, Key: idempotencyKeyOf(r.Context()),
	})
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if sb.State == sandbox.StateFailed {
		a.writeError(w, r, fmt.Errorf("%w: sandbox %s failed to start: %s; delete it and create another", errdefs.ErrFailedPrecondition, sb.ID, sb.Reason))
		return
	}
	a.host.ObserveCreate(time.Since(start))
	writeJSON(w, http.StatusCreated, a.apiOf(sb))
}

func fingerprintOf(method, path string, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", method, path)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

func (a *API) handleList(w http.ResponseWriter, r *http.Request) {
	q, err := parseSandboxQuery(r.URL.Query())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	sbs, err := a.svc.List(r.Context(), a.caller(r))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	all := make([]sandboxv1.Sandbox, 0, len(sbs))
	for _, sb := range sbs {
		all = append(all, a.apiOf(sb))
	}
	out := sandboxv1.SandboxList{}
	out.Sandboxes, out.NextPageToken = q.page(all)
	writeJSON(w, http.StatusOK, out)
}

func (a *API) handleGet(w http.ResponseWriter, r *http.Request) {
	sb, err := a.sandboxFor(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a.apiOf(sb))
}

// handleDelete marks the sandbox deleting and waits until its execution is
// gone: 204, or 202 when the reconciler is still finishing the deletion
// (the sandbox is already unusable and reported as deleting).
func (a *API) handleDelete(w http.ResponseWriter, r *http.Request) {
	err := a.svc.Delete(r.Context(), a.caller(r), r.PathValue("id"))
	switch {
	case errors.Is(err, service.ErrStillWorking):
		w.WriteHeader(http.StatusAccepted)
	case err != nil:
		a.writeError(w, r, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
