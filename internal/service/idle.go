package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// SetIdle sets the idle timeout of sandbox id to d (at least
// sandbox.MinIdleTimeout), counted from now: the update is the sandbox's
// latest change, which the idle clock counts from. Only a sandbox that has
// an idle timeout can change it: one created without runs an execution
// whose node does not track its requests.
func (s *Sandboxes) SetIdle(ctx context.Context, c Caller, id string, d time.Duration) (*sandbox.Sandbox, error) {
	if d < sandbox.MinIdleTimeout || d > sandbox.MaxTimeout {
		return nil, fmt.Errorf("%w: idle timeout %s: must be between %s and %s", errdefs.ErrInvalidArgument, d, sandbox.MinIdleTimeout, sandbox.MaxTimeout)
	}
	for {
		sb, err := s.Get(ctx, c, id)
		if err != nil {
			return nil, err
		}
		if sb.State == sandbox.StateDeleting {
			return nil, fmt.Errorf("%w: sandbox %s is deleting", errdefs.ErrConflict, sb.ID)
		}
		if sb.IdleTimeout <= 0 {
			return nil, fmt.Errorf("%w: sandbox %s was created without an idle timeout; set its timeout instead", errdefs.ErrFailedPrecondition, sb.ID)
		}
		sb.IdleTimeout = d
		err = s.store.UpdateSandbox(ctx, sb)
		if errors.Is(err, errdefs.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		s.rec.Enqueue(sb.ID)
		return sb, nil
	}
}
