package errdefs

import "errors"

// A Reason refines a class with a stable, machine-readable code: the class
// says what kind of failure it is (and so whether a retry may help), the reason
// says which one, for the callers that act on it. Both cross every transport
// (HTTP, Connect, the privileged RPC) unchanged, so a decision is never made
// on the text of an error.
type Reason string

// reasonError is a reason's sentinel. errors.Is matches it by identity and
// its class through Unwrap, so an error wrapping it is of both.
type reasonError struct {
	class  error
	reason Reason
}

func (e *reasonError) Error() string { return e.class.Error() }
func (e *reasonError) Unwrap() error { return e.class }

// newReason returns the sentinel of a reason of class. Sentinels are made once,
// in this file, so every transport knows every reason (Reasons).
func newReason(class error, reason Reason) error {
	e := &reasonError{class: class, reason: reason}
	reasons = append(reasons, e)
	return e
}

var reasons []*reasonError

// The reasons. Wrap one with %w as you would its class:
//
//	fmt.Errorf("%w: template %q is not on this node", errdefs.ErrTemplateMissing, name)
var (
	// ErrTemplateMissing: the node does not have the template an execution
	// starts from; making the template there and retrying may work.
	ErrTemplateMissing = newReason(ErrFailedPrecondition, "template_missing")
	// ErrRefreshRoute: the sandbox moved to another execution while the
	// request was on its way and it could not be replayed safely; the route
	// is repaired and a retry reaches the new execution.
	ErrRefreshRoute = newReason(ErrUnavailable, "refresh_route")
	// ErrClockSkew: the node's clock disagrees with the control plane's by
	// more than the capability skew allows.
	ErrClockSkew = newReason(ErrUnavailable, "clock_disagrees")
	// ErrRateLimited: too many requests in a short time; retry later.
	ErrRateLimited = newReason(ErrResourceExhausted, "rate_limited")
	// ErrQuotaExceeded: the request would take a tenant past its quota.
	ErrQuotaExceeded = newReason(ErrResourceExhausted, "quota_exceeded")
	// ErrNoCapacity: no node (or this node) has room for the request now.
	ErrNoCapacity = newReason(ErrResourceExhausted, "no_capacity")
	// ErrTooManyStreams: one sandbox has as many requests in flight as it
	// may (streams, watches, exec sessions); one must end first.
	ErrTooManyStreams = newReason(ErrResourceExhausted, "too_many_streams")
	// ErrTooLarge: a body, a file or a value is over its limit.
	ErrTooLarge = newReason(ErrInvalidArgument, "too_large")
	// ErrNotImplemented: this build or configuration does not offer the
	// operation; retrying it here will fail again.
	ErrNotImplemented = newReason(ErrFailedPrecondition, "not_implemented")
)

// ReasonOf returns the reason err carries, "" for none.
func ReasonOf(err error) Reason {
	var r *reasonError
	if errors.As(err, &r) {
		return r.reason
	}
	return ""
}

// ReasonError returns the sentinel of reason, nil for an unknown or empty one.
// Transports use it to rebuild an error that errors.Is recognises.
func ReasonError(reason Reason) error {
	for _, r := range reasons {
		if r.reason == reason {
			return r
		}
	}
	return nil
}

// Reasons returns the sentinels of every reason, for the transports' tables
// and their round-trip tests.
func Reasons() []error {
	out := make([]error, len(reasons))
	for i, r := range reasons {
		out[i] = r
	}
	return out
}

// Classes returns every class, for the transports' tables and their
// round-trip tests.
func Classes() []error {
	return []error{ErrNotFound, ErrConflict, ErrInvalidArgument, ErrFailedPrecondition,
		ErrPermissionDenied, ErrUnauthenticated, ErrUnavailable, ErrResourceExhausted}
}

// ClassOf returns the class of err, nil for an error of no class.
func ClassOf(err error) error {
	for _, c := range Classes() {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}
