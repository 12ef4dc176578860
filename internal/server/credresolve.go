package server

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// maxResolveBody bounds a resolve request: three identifiers and a host.
const maxResolveBody = 4 << 10

// nodeAuthenticated checks that a request comes from a node: it carries
// the join token, exactly as a heartbeat does.
func (s *Server) nodeAuthenticated(r *http.Request) error {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if s.cfg.JoinToken == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.JoinToken)) != 1 {
		return fmt.Errorf("%w: join token required", errdefs.ErrUnauthenticated)
	}
	return nil
}

// handleResolveCredential answers a node's gateway asking for the
// credential to inject into one request (nodev1.ResolveCredential). The
// request carries the node's own credential (nodecred.go), never the join
// token, and the node it authenticates is the one the execution must be
// placed on. A node may only obtain credentials for an execution it runs: the sandbox must
// exist, be live, have ExecID as its current execution, and be placed on
// the asking node; anything else is 403. The credential's scope is the
// sandbox's as the control plane records it, never what the node says.
func (s *Server) handleResolveCredential(w http.ResponseWriter, r *http.Request) {
	nodeID := r.PathValue("node")
	if !validNodeID(nodeID) {
		s.writeError(w, r, fmt.Errorf("%w: node id %q: want 1-63 of [a-z0-9-]", errdefs.ErrInvalidArgument, clip(nodeID)))
		return
	}
	if err := s.nodeCredentialAuthenticated(r, nodeID); err != nil {
		s.writeError(w, r, err)
		return
	}
	if s.cfg.Credentials == nil {
		s.writeError(w, r, errNoCredentials)
		return
	}
	var req nodev1.ResolveCredential
	r.Body = http.MaxBytesReader(w, r.Body, maxResolveBody)
	if err := decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	sb, err := s.executionOf(r, nodeID, req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	creq := credentials.Request{Tenant: sb.Tenant, Project: sb.Project, Sandbox: sb.ID, ExecutionID: sb.ExecID, Host: req.Host}
	if rd := req.Redaction; rd != nil {
		err := s.cfg.Credentials.RecordRedaction(r.Context(), credentials.Redaction{
			Request: creq, CredentialID: rd.CredentialID, Where: rd.Where, Count: rd.Count,
		})
		if err != nil {
			s.writeResolveError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, nodev1.ResolvedCredential{})
		return
	}
	if req.CheckOnly {
		ok, err := s.cfg.Credentials.Applies(r.Context(), creq)
		if err != nil {
			s.writeResolveError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, nodev1.ResolvedCredential{Applies: ok})
		return
	}
	cred, err := s.cfg.Credentials.Resolve(r.Context(), creq)
	if err != nil {
		s.writeResolveError(w, r, err)
		return
	}
	var buf bytes.Buffer
	err = json.NewEncoder(&buf).Encode(nodev1.ResolvedCredential{
		Applies: true, ID: cred.ID, Method: cred.Injection.Method, Name: cred.Injection.Name, Secret: cred.Secret,
	})
	cred.Zero()
	defer clear(buf.Bytes())
	if err != nil {
		s.writeError(w, r, fmt.Errorf("credential %s: encode: %w", cred.ID, err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}

// executionOf checks that req names the current execution of a live
// sandbox placed on nodeID, and returns the sandbox. Every refusal is
// ErrPermissionDenied: 404 means "no credential in scope" on this route.
func (s *Server) executionOf(r *http.Request, nodeID string, req nodev1.ResolveCredential) (*sandbox.Sandbox, error) {
	deny := func(why string) error {
		return fmt.Errorf("%w: node %s may not obtain credentials for execution %q of sandbox %q: %s; a node may only obtain credentials for executions it runs",
			errdefs.ErrPermissionDenied, nodeID, clip(req.ExecID), clip(req.SandboxID), why)
	}
	if !sandbox.ValidID(req.SandboxID) || !sandbox.ValidExecID(req.ExecID) {
		return nil, deny("malformed identifiers")
	}
	sb, err := s.store.GetSandboxByID(r.Context(), req.SandboxID)
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

// writeResolveError maps the credential manager's error classes to the
// statuses of the node contract: 404 no credential in scope, 403 none
// allows the host, 412 all expired, 429 rate limited, 503 store or audit
// log down. Unavailable is checked first: a failing store or audit log may
// carry another class too. Every answer but the 412 is the table's
// (internal/apierr; the rate limit is errdefs.ErrRateLimited).
func (s *Server) writeResolveError(w http.ResponseWriter, r *http.Request, err error) {
	var as error
	switch {
	case errors.Is(err, errdefs.ErrUnavailable):
		as = errdefs.ErrUnavailable
		s.log.Warn("credential resolve: store or audit log unavailable", "err", err)
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		writeJSON(w, http.StatusPreconditionFailed, sandboxv1.Error{Code: sandboxv1.CodeFailedPrecondition, Message: err.Error(),
			Reason: string(errdefs.ReasonOf(err))})
		return
	case errors.Is(err, errdefs.ErrResourceExhausted):
		as = errdefs.ErrRateLimited
	default:
		s.writeError(w, r, err)
		return
	}
	status, code, reason := apierr.Encode(apierr.ControlPlane, as)
	writeJSON(w, status, sandboxv1.Error{Code: code, Message: err.Error(), Reason: string(reason)})
}
