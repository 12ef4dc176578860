// Package errdefs defines SPACE's handful of error classes. Packages wrap one of
// these sentinels with %w and the identifiers that matter
// ("sandbox %s: %w", id, errdefs.ErrNotFound); callers test the class with
// errors.Is, and only the API edges (internal/restapi and the other
// adapters of the control plane, internal/apierr, internal/connecterr) map a
// class to an HTTP or RPC status. The design follows containerd's errdefs package.
//
// A class is never recognised by the text of an error: the sentinel's message is
// only the last, generic part of what a user sees.
package errdefs

import "errors"

// The error classes. Each one names what went wrong from the caller's point of
// view, not where.
var (
	// ErrNotFound means the named object does not exist, or exists but belongs
	// to someone the caller may not learn about.
	ErrNotFound = errors.New("not found")
	// ErrConflict means the request collides with the current state: an
	// illegal lifecycle transition, a stale version, a duplicate name.
	ErrConflict = errors.New("conflict")
	// ErrInvalidArgument means the request itself is malformed; retrying it
	// unchanged will fail again.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrFailedPrecondition means the system is not in a state where the
	// request can run (for example a database newer than this binary).
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrPermissionDenied means the caller is known but not allowed.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrUnauthenticated means the caller could not be identified.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrUnavailable means a dependency is down or busy; retrying later may work.
	ErrUnavailable = errors.New("unavailable")
	// ErrResourceExhausted means a quota, a limit or capacity ran out.
	ErrResourceExhausted = errors.New("resource exhausted")
)

// IsNotFound reports whether err is of class ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsConflict reports whether err is of class ErrConflict.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsInvalidArgument reports whether err is of class ErrInvalidArgument.
func IsInvalidArgument(err error) bool { return errors.Is(err, ErrInvalidArgument) }

// IsFailedPrecondition reports whether err is of class ErrFailedPrecondition.
func IsFailedPrecondition(err error) bool { return errors.Is(err, ErrFailedPrecondition) }

// IsPermissionDenied reports whether err is of class ErrPermissionDenied.
func IsPermissionDenied(err error) bool { return errors.Is(err, ErrPermissionDenied) }

// IsUnauthenticated reports whether err is of class ErrUnauthenticated.
func IsUnauthenticated(err error) bool { return errors.Is(err, ErrUnauthenticated) }

// IsUnavailable reports whether err is of class ErrUnavailable.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// IsResourceExhausted reports whether err is of class ErrResourceExhausted.
func IsResourceExhausted(err error) bool { return errors.Is(err, ErrResourceExhausted) }
