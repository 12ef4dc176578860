package server

import (
	"context"
	"encoding/json"
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
func (s *Server) apiOf(sb *sandbox.Sandbox) sandboxv1.Sandbox {
	out := sb.API()
	if out.Egress == nil {
		out.Egress = sandbox.EgressAPI(sb.EgressOr(s.cfg.DefaultEgress))
	}
	return out
}

// handleGetEgress answers the sandbox's egress policy.
func (s *Server) handleGetEgress(w http.ResponseWriter, r *http.Request) {
	p, err := s.svc.Egress(r.Context(), callerOf(r.Context()).service(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sandbox.EgressAPI(p))
}

// handleSetEgress validates a new egress policy and has the service store
// it and push it to the sandbox's running or paused execution: 503 when the
// push fails (the policy is stored and takes effect at the next start).
func (s *Server) handleSetEgress(w http.ResponseWriter, r *http.Request) {
	p, err := readPolicy(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.svc.SetEgress(r.Context(), callerOf(r.Context()).service(), r.PathValue("id"), p); err != nil {
		s.writeError(w, r, err)
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

// egressNodes pushes egress policies to the nodes' executions
// (service.EgressPusher).
type egressNodes struct{ n *Nodes }

func (e egressNodes) SetEgress(ctx context.Context, node, exec string, policy json.RawMessage) error {
	c, err := e.n.Client(node)
	if err != nil {
		return err
	}
	if err := c.SetEgress(ctx, exec, policy); err != nil {
		return fmt.Errorf("node %s: execution %s: %w", node, exec, err)
	}
	return nil
}
