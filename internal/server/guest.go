package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/api/guest/v1/filesystem/filesystemv1connect"
	"github.com/spacesandbox/space/api/guest/v1/process/processv1connect"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/nodeclient"
	"github.com/spacesandbox/space/internal/sandbox"
)

// maxGuestMessage bounds one message read from the guest protocol.
const maxGuestMessage = 32 << 20

// guestConn reaches the guest daemon of a sandbox's current execution, through
// the node that runs it and that execution's host bridge.
type guestConn struct {
	http    *http.Client
	base    string
	process processv1connect.ProcessClient
	fs      filesystemv1connect.FilesystemClient
}

// nodeWait is how long a request waits for its node to report after a
// restart of the control plane (nodes report every two seconds).
const nodeWait = 5 * time.Second

// guestFor returns the guest of a running sandbox, for operations op: every
// request carries a capability bound to the sandbox's current execution,
// which the node checks against the execution it runs.
func (s *Server) guestFor(ctx context.Context, sb *sandbox.Sandbox, op capability.Op) (*guestConn, error) {
	if sb.State != sandbox.StateRunning && sb.IdleTimeout > 0 {
		woken, err := s.wake(ctx, sb)
		if err != nil {
			return nil, err
		}
		*sb = *woken
	}
	if sb.State != sandbox.StateRunning {
		return nil, fmt.Errorf("%w: sandbox %s is %s, not running", errdefs.ErrConflict, sb.ID, sb.State)
	}
	nc, err := s.nodes.clientWait(ctx, sb.Node, nodeWait)
	if err != nil {
		return nil, err
	}
	token, err := s.cfg.Signer.Mint(capability.Identity{
		Sandbox: sb.ID, Generation: sb.Generation, Node: sb.Node, Substrate: sb.Runtime, Activation: sb.ActivationID,
	}, op, 0, "")
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: capability: %w", sb.ID, err)
	}
	return newGuestConn(nc, sb.ExecID, capability.Encode(token)), nil
}

// capabilityTransport puts the request's capability on every guest call.
type capabilityTransport struct {
	token string
	next  http.RoundTripper
}

func (t capabilityTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(capability.Header, t.token)
	return t.next.RoundTrip(r)
}

func newGuestConn(nc *nodeclient.Client, execID, token string) *guestConn {
	shared, base := nc.GuestHTTP(execID)
	hc := &http.Client{Transport: capabilityTransport{token: token, next: shared.Transport}}
	opts := []connect.ClientOption{connect.WithReadMaxBytes(maxGuestMessage)}
	return &guestConn{
		http:    hc,
		base:    base,
		process: processv1connect.NewProcessClient(hc, base, opts...),
		fs:      filesystemv1connect.NewFilesystemClient(hc, base, opts...),
	}
}

// asUser makes a guest request run as user (E2B's Basic-auth convention).
func asUser[T any](req *connect.Request[T], user string) *connect.Request[T] {
	if user != "" {
		req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
	return req
}

// guestError turns a guest protocol error into an error class.
func guestError(op string, err error) error {
	var class error
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		class = errdefs.ErrNotFound
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		class = errdefs.ErrInvalidArgument
	case connect.CodeAlreadyExists:
		class = errdefs.ErrConflict
	case connect.CodePermissionDenied:
		class = errdefs.ErrPermissionDenied
	case connect.CodeFailedPrecondition:
		class = errdefs.ErrFailedPrecondition
	case connect.CodeResourceExhausted:
		class = errdefs.ErrResourceExhausted
	case connect.CodeDeadlineExceeded:
		class = errdefs.ErrUnavailable
	default:
		class = errdefs.ErrUnavailable
	}
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	return fmt.Errorf("%w: %s: %s", class, op, msg)
}
