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

// guestFor returns the guest of a running sandbox.
func (s *Server) guestFor(ctx context.Context, sb *sandbox.Sandbox) (*guestConn, error) {
	if sb.State != sandbox.StateRunning {
		return nil, fmt.Errorf("%w: sandbox %s is %s, not running", errdefs.ErrConflict, sb.ID, sb.State)
	}
	nc, err := s.nodes.clientWait(ctx, sb.Node, nodeWait)
	if err != nil {
		return nil, err
	}
	return newGuestConn(nc, sb.ExecID), nil
}

func newGuestConn(nc *nodeclient.Client, execID string) *guestConn {
	hc, base := nc.GuestHTTP(execID)
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
