package restapi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/api/guest/v1/filesystem/filesystemv1connect"
	"github.com/spacesandbox/space/api/guest/v1/process/processv1connect"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Guest reaches the guest daemon of a sandbox's current execution, through
// the node that runs it and that execution's host bridge (Host.Guest makes
// it: the route, the capability every request carries and its repair when
// the sandbox moves are the control plane's).
type Guest struct {
	// HTTP carries requests addressed to Base to the guest daemon.
	HTTP *http.Client
	// Base is the origin of the guest's URLs.
	Base string
	// Process and Files are the guest protocol's services over HTTP.
	Process processv1connect.ProcessClient
	Files   filesystemv1connect.FilesystemClient
}

// ReadFile reads at most limit bytes of file path in the guest as user.
func (g *Guest) ReadFile(ctx context.Context, path, user string, limit int64) ([]byte, error) {
	op := "read " + path
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, guestFilesURL(g, path, user), nil)
	resp, err := g.HTTP.Do(req)
	if err != nil {
		return nil, transportError(op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, guestHTTPError(op, resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, transportError(op, err)
	}
	return b, nil
}

// asUser makes a guest request run as user (E2B's Basic-auth convention).
func asUser[T any](req *connect.Request[T], user string) *connect.Request[T] {
	if user != "" {
		req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
	return req
}

// ErrRouteChanged marks a request refused because its sandbox moved to a new
// execution on the way and that could not be replayed: retrying is safe.
// The Host's guest transport returns it; the handlers keep its class.
var ErrRouteChanged = fmt.Errorf("%w: route changed", errdefs.ErrRefreshRoute)

// GuestError turns a guest protocol error into an error class. An error of
// SPACE's own with a reason (a route that changed, a node whose clock
// disagrees) keeps it.
func GuestError(op string, err error) error {
	if errdefs.ReasonOf(err) != "" {
		return fmt.Errorf("%s: %w", op, err)
	}
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
