package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
)

// CheckJoinToken checks that a request comes from a node: it carries the
// join token (nodefacing.ControlPlane).
func (s *Server) CheckJoinToken(bearer string) error {
	if s.cfg.JoinToken == "" || subtle.ConstantTimeCompare([]byte(bearer), []byte(s.cfg.JoinToken)) != 1 {
		return fmt.Errorf("%w: join token required", errdefs.ErrUnauthenticated)
	}
	return nil
}

// CheckNodeCredential checks that a request carries node id's own
// credential (nodefacing.ControlPlane). The join token, an API key or
// another node's credential is refused.
func (s *Server) CheckNodeCredential(id, bearer string) error {
	if !service.ValidNodeID(id) {
		return fmt.Errorf("%w: node id %q: want 1-63 of [a-z0-9-]", errdefs.ErrUnauthenticated, clip(id))
	}
	if !macEqual(bearer, s.nodeCredential(id)) {
		return fmt.Errorf("%w: node %s: send the node's own credential (from its heartbeat answer) as Authorization: Bearer; the join token only registers nodes", errdefs.ErrUnauthenticated, id)
	}
	return nil
}

// ResolveNodeCredential answers a node's gateway asking for the credential
// to inject into one request (nodefacing.ControlPlane; the caller checked
// the node's own credential). A node may only obtain credentials for an
// execution it runs: the sandbox must exist, be live, have ExecID as its
// current execution, and be placed on the asking node; anything else is
// PermissionDenied. The credential's scope is the sandbox's as the control
// plane records it, never what the node says. Errors: NotFound no
// credential in scope, PermissionDenied none allows the host,
// FailedPrecondition all expired, ResourceExhausted rate limited,
// Unavailable store or audit log down.
func (s *Server) ResolveNodeCredential(ctx context.Context, nodeID string, req nodev1.ResolveCredential) (*nodev1.ResolvedCredential, error) {
	if s.cfg.Credentials == nil {
		return nil, errNoCredentials
	}
	sb, err := s.executionOf(ctx, nodeID, req)
	if err != nil {
		return nil, err
	}
	creq := credentials.Request{Tenant: sb.Tenant, Project: sb.Project, Sandbox: sb.ID, ExecutionID: sb.ExecID, Host: req.Host}
	if rd := req.Redaction; rd != nil {
		err := s.cfg.Credentials.RecordRedaction(ctx, credentials.Redaction{
			Request: creq, CredentialID: rd.CredentialID, Where: rd.Where, Count: rd.Count,
		})
		if err != nil {
			return nil, s.resolveError(err)
		}
		return &nodev1.ResolvedCredential{}, nil
	}
	if req.CheckOnly {
		ok, err := s.cfg.Credentials.Applies(ctx, creq)
		if err != nil {
			return nil, s.resolveError(err)
		}
		return &nodev1.ResolvedCredential{Applies: ok}, nil
	}
	cred, err := s.cfg.Credentials.Resolve(ctx, creq)
	if err != nil {
		return nil, s.resolveError(err)
	}
	// The answer holds its own copy of the secret until it is sent.
	out := &nodev1.ResolvedCredential{
		Applies: true, ID: cred.ID, Method: cred.Injection.Method, Name: cred.Injection.Name, Secret: bytes.Clone(cred.Secret),
	}
	cred.Zero()
	return out, nil
}

// executionOf checks that req names the current execution of a live
// sandbox placed on nodeID, and returns the sandbox. Every refusal is
// ErrPermissionDenied: 404 means "no credential in scope" on this route.
func (s *Server) executionOf(ctx context.Context, nodeID string, req nodev1.ResolveCredential) (*sandbox.Sandbox, error) {
	deny := func(why string) error {
		return fmt.Errorf("%w: node %s may not obtain credentials for execution %q of sandbox %q: %s; a node may only obtain credentials for executions it runs",
			errdefs.ErrPermissionDenied, nodeID, clip(req.ExecID), clip(req.SandboxID), why)
	}
	if !sandbox.ValidID(req.SandboxID) || !sandbox.ValidExecID(req.ExecID) {
		return nil, deny("malformed identifiers")
	}
	sb, err := s.store.GetSandboxByID(ctx, req.SandboxID)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return nil, deny("no such sandbox")
	case err != nil:
		return nil, err
	case sb.State == sandbox.StateDeleting || sb.State == sandbox.StateDeleted || sb.State == sandbox.StateFailed:
		return nil, deny("the sandbox is " + string(sb.State))
	case sb.ExecID != req.ExecID:
		return nil, deny("it is not the sandbox's current execution")
	case sb.Node != nodeID:
		return nil, deny("the execution is not placed on this node")
	}
	return sb, nil
}

// resolveError gives the credential manager's error the one class the node
// contract names for it: Unavailable (store or audit log down) first, as a
// failing store may carry another class too, then FailedPrecondition (all
// expired) and ResourceExhausted (rate limited).
func (s *Server) resolveError(err error) error {
	switch {
	case errors.Is(err, errdefs.ErrUnavailable):
		s.log.Warn("credential resolve: store or audit log unavailable", "err", err)
		return fmt.Errorf("%w: %s", errdefs.ErrUnavailable, err)
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		return fmt.Errorf("%w: %s", errdefs.ErrFailedPrecondition, err)
	case errors.Is(err, errdefs.ErrResourceExhausted):
		if errdefs.ReasonOf(err) == "" {
			return fmt.Errorf("%w: %w", errdefs.ErrRateLimited, err)
		}
	}
	return err
}
