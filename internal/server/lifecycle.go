package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// lifecycleWait bounds how long a lifecycle request waits for its result.
const lifecycleWait = 2 * time.Minute

// handleLifecycle starts op on the sandbox and answers once the sandbox has
// settled (or with 202 and the transitional state if that takes too long).
// An illegal transition is 409 naming the current state.
func (s *Server) handleLifecycle(op sandbox.Op) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sb, err := s.sandboxFor(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		wait := s.rec.Watch(sb.ID)
		defer wait.Stop()
		for {
			err = sb.Apply(op)
			if err == nil {
				err = s.store.UpdateSandbox(r.Context(), sb)
			}
			if !errors.Is(err, errdefs.ErrConflict) || errors.As(err, new(*sandbox.IllegalTransitionError)) {
				break
			}
			if sb, err = s.sandboxFor(r); err != nil {
				break
			}
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.event(r.Context(), sb.ID, "state", fmt.Sprintf("%s requested", op))
		s.rec.Enqueue(sb.ID)
		ctx, cancel := context.WithTimeout(r.Context(), lifecycleWait)
		defer cancel()
		for sb.State.Transitional() {
			select {
			case <-wait.C:
			case <-ctx.Done():
				writeJSON(w, http.StatusAccepted, sb.API())
				return
			}
			if sb, err = s.store.GetSandboxByID(ctx, sb.ID); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		writeJSON(w, http.StatusOK, sb.API())
	}
}
