package privop

import (
	"errors"
	"fmt"

	"github.com/spacesandbox/space/internal/errdefs"
)

// errorKinds maps error classes to the names carried on the wire, so the
// client can rebuild an error that errors.Is recognises. A reason travels
// beside the kind (Response.ErrorReason) under its errdefs name.
var errorKinds = []struct {
	name string
	err  error
}{
	{"not_found", errdefs.ErrNotFound},
	{"invalid_argument", errdefs.ErrInvalidArgument},
	{"failed_precondition", errdefs.ErrFailedPrecondition},
	{"permission_denied", errdefs.ErrPermissionDenied},
	{"unauthenticated", errdefs.ErrUnauthenticated},
	{"conflict", errdefs.ErrConflict},
	{"resource_exhausted", errdefs.ErrResourceExhausted},
	{"unavailable", errdefs.ErrUnavailable},
}

// KindOf returns the wire name of err's class, "internal" for none.
func KindOf(err error) string {
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "internal"
}

// ErrorResponse is the Response that answers err: its text, class and
// reason.
func ErrorResponse(err error) Response {
	return Response{Error: err.Error(), ErrorKind: KindOf(err), ErrorReason: string(errdefs.ReasonOf(err))}
}

// RemoteError is an error the node-manager answered. It matches its error
// class, and its reason when it had one, with errors.Is.
type RemoteError struct {
	Op      Op
	Message string
	// class is the reason's sentinel (of its class too), or the class.
	class error
}

func (e *RemoteError) Error() string { return fmt.Sprintf("node-manager %s: %s", e.Op, e.Message) }

// Unwrap returns the error's reason or class (nil for none), so errors.Is
// and errdefs.ReasonOf see them.
func (e *RemoteError) Unwrap() error { return e.class }

// remoteError rebuilds an error from a response: a reason this build knows
// decides, else the kind; an unknown kind is of no class.
func remoteError(op Op, r *Response) error {
	e := &RemoteError{Op: op, Message: r.Error}
	if sentinel := errdefs.ReasonError(errdefs.Reason(r.ErrorReason)); sentinel != nil {
		e.class = sentinel
		return e
	}
	for _, k := range errorKinds {
		if k.name == r.ErrorKind {
			e.class = k.err
		}
	}
	return e
}
