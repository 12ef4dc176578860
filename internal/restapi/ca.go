package restapi

import (
	"fmt"
	"net/http"

	"github.com/spacesandbox/space/internal/errdefs"
)

// handleGetCA answers GET /v1/sandboxes/{id}/ca.pem: the certificate of the
// CA the sandbox trusts, so its owner can see what that is.
func (a *API) handleGetCA(w http.ResponseWriter, r *http.Request) {
	sb, err := a.sandboxFor(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if sb.CACert == "" {
		a.writeError(w, r, fmt.Errorf("%w: sandbox %s has no interception CA yet: it gets one at its next start", errdefs.ErrNotFound, sb.ID))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write([]byte(sb.CACert))
}
