package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// egressPushTimeout bounds one push of a policy to a node.
const egressPushTimeout = 15 * time.Second

// EgressPusher gives execution exec on node its new egress policy (the
// JSON of sandbox.EgressJSON). The control plane's node registry is one.
type EgressPusher interface {
	SetEgress(ctx context.Context, node, exec string, policy json.RawMessage) error
}

// Egress returns the policy sandbox id follows: its own, or the default
// of a sandbox recorded without one.
func (s *Sandboxes) Egress(ctx context.Context, c Caller, id string) (*egress.Policy, error) {
	sb, err := s.Get(ctx, c, id)
	if err != nil {
		return nil, err
	}
	return sb.EgressOr(s.cfg.DefaultEgress), nil
}

// SetEgress stores p as sandbox id's egress policy, then pushes it to the
// sandbox's running or paused execution. The stored policy is never rolled
// back: when the push fails the error is Unavailable, and the policy takes
// effect at the next start. The updates of one sandbox are serialised, so
// that its running execution ends with the policy stored last.
func (s *Sandboxes) SetEgress(ctx context.Context, c Caller, id string, p *egress.Policy) error {
	if _, err := s.Get(ctx, c, id); err != nil { // NotFound before waiting on the lock
		return err
	}
	unlock, err := s.egressLocks.LockContext(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	sb, err := s.storeEgress(ctx, c, id, p)
	if err != nil {
		return err
	}
	s.Event(ctx, sb.ID, "egress", "egress policy replaced")
	if err := s.pushEgress(ctx, sb.ID, p); err != nil {
		s.log.Warn("egress policy stored but not pushed", "sandbox", sb.ID, "err", err)
		s.Event(ctx, sb.ID, "egress", "new egress policy not applied to the running execution: "+err.Error())
		return fmt.Errorf("%w: sandbox %s: the new egress policy is stored and applies at the next start, "+
			"but the running execution still has the previous one (%v); PUT it again to retry", errdefs.ErrUnavailable, sb.ID, err)
	}
	return nil
}

// storeEgress records p as sandbox id's policy, retrying on a concurrent
// update.
func (s *Sandboxes) storeEgress(ctx context.Context, c Caller, id string, p *egress.Policy) (*sandbox.Sandbox, error) {
	for {
		sb, err := s.Get(ctx, c, id)
		if err != nil {
			return nil, err
		}
		if sb.State == sandbox.StateDeleting {
			return nil, fmt.Errorf("%w: sandbox %s is deleting", errdefs.ErrConflict, sb.ID)
		}
		sb.Egress = p
		err = s.store.UpdateSandbox(ctx, sb)
		if errors.Is(err, errdefs.ErrConflict) {
			continue
		}
		return sb, err
	}
}

// pushEgress gives p to the sandbox's execution when it has one. It runs
// after p is stored, so an execution that starts from now on gets p in its
// StartExecution; one whose start is under way may have been sent the
// previous policy, so a sandbox in a transitional state is waited for and
// then pushed to. Stopped, hibernated and failed sandboxes have no
// execution: p applies when they start.
func (s *Sandboxes) pushEgress(ctx context.Context, id string, p *egress.Policy) error {
	wait := s.rec.Watch(id)
	defer wait.Stop()
	sb, err := s.store.GetSandboxByID(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil // deleted meanwhile: nothing runs it
	}
	if err != nil {
		return err
	}
	if sb.State.Transitional() && sb.State != sandbox.StateDeleting {
		if sb, err = s.WaitSettled(ctx, sb, wait); errors.Is(err, ErrStillWorking) {
			return fmt.Errorf("the sandbox is still %s after %s, and its new execution may have started with the previous policy", sb.State, lifecycleWait)
		} else if err != nil {
			return err
		}
	}
	if sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused || sb.Node == "" || sb.ExecID == "" {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, egressPushTimeout)
	defer cancel()
	return s.cfg.Egress.SetEgress(pctx, sb.Node, sb.ExecID, sandbox.EgressJSON(p))
}
