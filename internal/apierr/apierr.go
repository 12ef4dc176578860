// Package apierr maps SPACE's error classes (internal/errdefs) to the HTTP
// status and API error code every HTTP edge answers with: the control plane's
// REST API and the node-api give a class the same status and code.
package apierr

import (
	"errors"
	"net/http"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

// classes is checked in order; the first class err belongs to decides.
var classes = []struct {
	class  error
	status int
	code   string
}{
	{errdefs.ErrInvalidArgument, http.StatusBadRequest, sandboxv1.CodeInvalidArgument},
	{errdefs.ErrUnauthenticated, http.StatusUnauthorized, sandboxv1.CodeUnauthenticated},
	{errdefs.ErrPermissionDenied, http.StatusForbidden, sandboxv1.CodePermissionDenied},
	{errdefs.ErrNotFound, http.StatusNotFound, sandboxv1.CodeNotFound},
	{errdefs.ErrConflict, http.StatusConflict, sandboxv1.CodeConflict},
	{errdefs.ErrFailedPrecondition, http.StatusConflict, sandboxv1.CodeFailedPrecondition},
	{errdefs.ErrResourceExhausted, http.StatusServiceUnavailable, sandboxv1.CodeUnavailable},
	{errdefs.ErrUnavailable, http.StatusServiceUnavailable, sandboxv1.CodeUnavailable},
}

// Status returns the HTTP status and API code of err's class; an error of no
// class is a 500 "internal".
func Status(err error) (int, string) {
	for _, c := range classes {
		if errors.Is(err, c.class) {
			return c.status, c.code
		}
	}
	return http.StatusInternalServerError, sandboxv1.CodeInternal
}

// codeClasses maps API error codes back to error classes, for clients of
// SPACE's own HTTP edges (node → control plane, control plane → node).
var codeClasses = map[string]error{
	sandboxv1.CodeInvalidArgument:    errdefs.ErrInvalidArgument,
	sandboxv1.CodeUnauthenticated:    errdefs.ErrUnauthenticated,
	sandboxv1.CodePermissionDenied:   errdefs.ErrPermissionDenied,
	sandboxv1.CodeNotFound:           errdefs.ErrNotFound,
	sandboxv1.CodeConflict:           errdefs.ErrConflict,
	sandboxv1.CodeFailedPrecondition: errdefs.ErrFailedPrecondition,
	sandboxv1.CodeRateLimited:        errdefs.ErrResourceExhausted,
	sandboxv1.CodeUnavailable:        errdefs.ErrUnavailable,
}

// ClassOf returns the error class of an API error code, nil for a code of
// no class (internal, or unknown).
func ClassOf(code string) error { return codeClasses[code] }
