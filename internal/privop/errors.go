package privop

import (
	"errors"
	"fmt"

	"github.com/spacesandbox/space/internal/errdefs"
)

// errorKinds maps error classes to the names carried on the wire, so the
// client can rebuild an error that errors.Is recognises.
var errorKinds = []struct {
	name string
	err  error
}{
	{"not_found", errdefs.ErrNotFound},
	{"invalid_argument", errdefs.ErrInvalidArgument},
	{"failed_precondition", errdefs.ErrFailedPrecondition},
	{"permission_denied", errdefs.ErrPermissionDenied},
	{"conflict", errdefs.ErrConflict},
	{"resource_exhausted", errdefs.ErrResourceExhausted},
	{"unavailable", errdefs.ErrUnavailable},
}

func KindOf(err error) string {
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "internal"
}

// RemoteError is an error the node-manager answered. It matches its error
// class with errors.Is.
type RemoteError struct {
	Op      Op
	Message string
	class   error
}

func (e *RemoteError) Error() string { return fmt.Sprintf("node-manager %s: %s", e.Op, e.Message) }

// Is reports whether target is the error's class.
func (e *RemoteError) Is(target error) bool { return e.class != nil && target == e.class }

// remoteError rebuilds an error from a response.
func remoteError(op Op, r *Response) error {
	e := &RemoteError{Op: op, Message: r.Error}
	for _, k := range errorKinds {
		if k.name == r.ErrorKind {
			e.class = k.err
		}
	}
	return e
}
