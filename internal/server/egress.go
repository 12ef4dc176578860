package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
)

// egressPushTimeout bounds one push of a policy to a node.
const egressPushTimeout = 15 * time.Second

// apiOf is the sandbox as the API reports it, with the policy it follows
// even when it has none of its own.
func (s *Server) apiOf(sb *sandbox.Sandbox) sandboxv1.Sandbox {
	out := sb.API()
	if out.Egress == nil {
		out.Egress = sandbox.EgressAPI(sb.EgressOr(s.cfg.DefaultEgress))
	}
	return out
}

// handleGetEgress answers the sandbox's egress policy.
func (s *Server) handleGetEgress(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandboxFor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sandbox.EgressAPI(sb.EgressOr(s.cfg.DefaultEgress)))
}

// handleSetEgress validates and stores a new egress policy, then pushes it
// to the sandbox's running or paused execution. The stored policy is never
// rolled back: when the push fails the answer is 503, and the policy takes
// effect at the next start.
func (s *Server) handleSetEgress(w http.ResponseWriter, r *http.Request) {
	p, err := readPolicy(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, err := s.sandboxFor(r); err != nil { // 404 before waiting on the lock
		s.writeError(w, r, err)
		return
	}
	unlock, err := s.egressLocks.LockContext(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer unlock()
	sb, err := s.storeEgress(r, p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.event(r.Context(), sb.ID, "egress", "egress policy replaced")
	if err := s.pushEgress(r.Context(), sb.ID, p); err != nil {
		s.log.Warn("egress policy stored but not pushed", "sandbox", sb.ID, "err", err)
		s.event(r.Context(), sb.ID, "egress", "new egress policy not applied to the running execution: "+err.Error())
		s.writeError(w, r, fmt.Errorf("%w: sandbox %s: the new egress policy is stored and applies at the next start, "+
			"but the running execution still has the previous one (%v); PUT it again to retry", errdefs.ErrUnavailable, sb.ID, err))
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

// storeEgress records p as the request's sandbox's policy, retrying on a
// concurrent update.
func (s *Server) storeEgress(r *http.Request, p *egress.Policy) (*sandbox.Sandbox, error) {
	for {
		sb, err := s.sandboxFor(r)
		if err != nil {
			return nil, err
		}
		if sb.State == sandbox.StateDeleting {
			return nil, fmt.Errorf("%w: sandbox %s is deleting", errdefs.ErrConflict, sb.ID)
		}
		sb.Egress = p
		err = s.store.UpdateSandbox(r.Context(), sb)
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
func (s *Server) pushEgress(ctx context.Context, id string, p *egress.Policy) error {
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
		if sb, err = s.svc.WaitSettled(ctx, sb, wait); errors.Is(err, service.ErrStillWorking) {
			return fmt.Errorf("the sandbox is still %s after %s, and its new execution may have started with the previous policy", sb.State, service.LifecycleWait)
		} else if err != nil {
			return err
		}
	}
	if sb.State != sandbox.StateRunning && sb.State != sandbox.StatePaused || sb.Node == "" || sb.ExecID == "" {
		return nil
	}
	node, err := s.nodes.Client(sb.Node)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, egressPushTimeout)
	defer cancel()
	if err := node.SetEgress(pctx, sb.ExecID, sandbox.EgressJSON(p)); err != nil {
		return fmt.Errorf("node %s: execution %s: %w", sb.Node, sb.ExecID, err)
	}
	return nil
}
