package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/spacesandbox/space/internal/apikey"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/restapi"
	"github.com/spacesandbox/space/internal/service"
)

// caller is the authenticated principal of a request.
type caller struct {
	Tenant string
	KeyID  string
	Admin  bool
}

type callerKey struct{}

func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

var errBadKey = fmt.Errorf("%w: missing or invalid API key; send Authorization: Bearer <key>", errdefs.ErrUnauthenticated)

// authenticate resolves the bearer API key to a tenant. A revoked key is
// refused on its next request: the key row is read on every request.
func (s *Server) authenticate(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			raw, ok = restapi.WebSocketBearer(r)
		}
		if !ok {
			s.writeError(w, r, errBadKey)
			return
		}
		key, err := apikey.Parse(strings.TrimSpace(raw))
		if err != nil {
			s.writeError(w, r, errBadKey)
			return
		}
		stored, err := s.store.GetAPIKey(r.Context(), key.ID)
		if err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				s.writeError(w, r, errBadKey)
				return
			}
			s.writeError(w, r, err)
			return
		}
		if stored.Revoked() || !key.Matches(stored.Hash) {
			s.writeError(w, r, errBadKey)
			return
		}
		ctx := context.WithValue(r.Context(), callerKey{}, caller{Tenant: stored.Tenant, KeyID: stored.ID, Admin: stored.Admin})
		next(w, r.WithContext(ctx))
	}
}

func (s *Server) requireAdmin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !callerOf(r.Context()).Admin {
			s.writeError(w, r, restapi.ErrAdminOnly)
			return
		}
		next(w, r)
	}
}

// service is the caller as the operations of internal/service take it.
func (c caller) service() service.Caller {
	return service.Caller{Tenant: c.Tenant, Admin: c.Admin, KeyID: c.KeyID}
}

// clip shortens a caller-supplied string for an error message.
func clip(s string) string { return service.Clip(s) }
