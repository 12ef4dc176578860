package restapi

import (
	"fmt"
	"io"
	"net/http"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// apiOf is the sandbox as the API reports it, with the policy it follows
// even when it has none of its own.
func (a *API) apiOf(sb *sandbox.Sandbox) sandboxv1.Sandbox {
	out := sb.API()
	if out.Egress == nil {
		out.Egress = sandbox.EgressAPI(sb.EgressOr(a.cfg.DefaultEgress))
	}
	return out
}

// handleGetEgress answers the sandbox's egress policy.
func (a *API) handleGetEgress(w http.ResponseWriter, r *http.Request) {
	p, err := a.svc.Egress(r.Context(), a.caller(r), r.PathValue("id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sandbox.EgressAPI(p))
}

// handleSetEgress validates a new egress policy and has the service store
// it and push it to the sandbox's running or paused execution: 503 when the
// push fails (the policy is stored and takes effect at the next start).
func (a *API) handleSetEgress(w http.ResponseWriter, r *http.Request) {
	p, err := readPolicy(w, r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if err := a.svc.SetEgress(r.Context(), a.caller(r), r.PathValue("id"), p); err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sandbox.EgressAPI(p))
}

// readPolicy reads and validates a policy body with egress.ParsePolicy,
// whose errors (unknown fields included) are the 400's message.
func readPolicy(w http.ResponseWriter, r *http.Request) (*egress.Policy, error) {
	if r.ContentLength > egress.MaxPolicyBytes {
		return nil, fmt.Errorf("%w: egress policy is over %d bytes", errTooLarge, egress.MaxPolicyBytes)
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, egress.MaxPolicyBytes))
	if err != nil {
		if isMaxBytes(err) {
			return nil, fmt.Errorf("%w: egress policy is over %d bytes", errTooLarge, egress.MaxPolicyBytes)
		}
		return nil, fmt.Errorf("%w: read body: %v", errdefs.ErrInvalidArgument, err)
	}
	return egress.ParsePolicy(b)
}
