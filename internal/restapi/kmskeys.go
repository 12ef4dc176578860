package restapi

import (
	"fmt"
	"net/http"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/kms"
	"github.com/spacesandbox/space/internal/sandbox"
)

// Tenant encryption keys (BYOK): every artifact a tenant's sandboxes write
// to object storage has its data key wrapped by the tenant's key. Revoking
// the key makes all of them unreadable: a restore is refused with the reason.

func (a *API) handleListEncryptionKeys(w http.ResponseWriter, r *http.Request) {
	tenant, err := a.encryptionTenant(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	keys, err := a.cfg.KMS.Keys(r.Context(), tenant)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := sandboxv1.EncryptionKeyList{Keys: []sandboxv1.EncryptionKey{}}
	for _, k := range keys {
		ek := sandboxv1.EncryptionKey{ID: k.ID, Tenant: k.Tenant, CreatedAt: k.Created}
		if !k.RevokedAt.IsZero() {
			t := k.RevokedAt
			ek.RevokedAt = &t
		}
		out.Keys = append(out.Keys, ek)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) handleRevokeEncryptionKey(w http.ResponseWriter, r *http.Request) {
	tenant, err := a.encryptionTenant(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	id := r.PathValue("key")
	if err := kms.ValidKeyID(id); err != nil {
		a.writeError(w, r, fmt.Errorf("%w: encryption key %q", errdefs.ErrNotFound, clip(id)))
		return
	}
	keys, err := a.cfg.KMS.Keys(r.Context(), tenant)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	for _, k := range keys {
		if k.ID == id {
			if err := a.cfg.KMS.RevokeKey(r.Context(), id); err != nil {
				a.writeError(w, r, err)
				return
			}
			a.log.Warn("tenant encryption key revoked", "tenant", tenant, "key", id)
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	a.writeError(w, r, fmt.Errorf("%w: tenant %s has no encryption key %s", errdefs.ErrNotFound, tenant, clip(id)))
}

// encryptionTenant is the tenant of an encryption key request; only the
// admin key manages them.
func (a *API) encryptionTenant(r *http.Request) (string, error) {
	if a.cfg.KMS == nil {
		return "", fmt.Errorf("%w: no KMS is configured", errdefs.ErrFailedPrecondition)
	}
	id := r.PathValue("id")
	if !sandbox.ValidTenantID(id) {
		return "", fmt.Errorf("%w: tenant %q", errdefs.ErrNotFound, clip(id))
	}
	if _, err := a.store.GetTenant(r.Context(), id); err != nil {
		return "", err
	}
	return id, nil
}
