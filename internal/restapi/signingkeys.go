package restapi

import (
	"fmt"
	"net/http"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
)

func apiSigningKey(k capability.KeyInfo) sandboxv1.SigningKey {
	out := sandboxv1.SigningKey{ID: k.ID, CreatedAt: k.Created, ActiveAt: k.Active, Signing: k.Signing}
	if !k.Retired.IsZero() {
		t := k.Retired
		out.RetiredAt = &t
	}
	if !k.Dropped.IsZero() {
		t := k.Dropped
		out.DroppedAt = &t
	}
	return out
}

// handleListSigningKeys lists the capability signing keys (admin).
func (a *API) handleListSigningKeys(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Keyring == nil {
		a.writeError(w, r, fmt.Errorf("%w: this control plane has a fixed signing key", errdefs.ErrFailedPrecondition))
		return
	}
	out := sandboxv1.SigningKeyList{Version: a.cfg.Keyring.KeySet().Version, Keys: []sandboxv1.SigningKey{}}
	for _, k := range a.cfg.Keyring.Keys() {
		out.Keys = append(out.Keys, apiSigningKey(k))
	}
	writeJSON(w, http.StatusOK, out)
}

// handleRotateSigningKey makes a new capability signing key (admin): it is
// published to nodes at once and signs after capability.ActivationDelay;
// the old key keeps verifying what it signed until those capabilities
// expire.
func (a *API) handleRotateSigningKey(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Keyring == nil {
		a.writeError(w, r, fmt.Errorf("%w: this control plane has a fixed signing key", errdefs.ErrFailedPrecondition))
		return
	}
	k, err := a.cfg.Keyring.Rotate()
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	a.log.Warn("capability signing key rotated", "key", k.ID, "signs_from", k.Active)
	writeJSON(w, http.StatusOK, apiSigningKey(k))
}
