// Package connecterr carries SPACE's errors over Connect without loss: the
// class of an error (errdefs) travels as the Connect code, one code per
// class, and its reason (errdefs.Reason) beside it in the error's metadata,
// so that errors.Is on the caller's side finds the class and the reason the
// callee had. The message travels as the Connect message.
//
// Both ends of a Connect service use it: the callee through Interceptor (or
// Encode), the caller through Decode.
package connecterr

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/internal/errdefs"
)

// ReasonKey is the metadata key (a header or trailer) of an error's reason.
const ReasonKey = "Space-Error-Reason"

// codes is the table: each class and its code. It is a bijection, so a
// code names its class again; TestEveryClassAndReasonRoundTrips holds it to
// that.
var codes = []struct {
	class error
	code  connect.Code
}{
	{errdefs.ErrNotFound, connect.CodeNotFound},
	// Conflict: the state changed under the request (an illegal
	// transition, a stale version, a duplicate); Aborted is Connect's code
	// for it, AlreadyExists being only its duplicate case.
	{errdefs.ErrConflict, connect.CodeAborted},
	{errdefs.ErrInvalidArgument, connect.CodeInvalidArgument},
	{errdefs.ErrFailedPrecondition, connect.CodeFailedPrecondition},
	{errdefs.ErrPermissionDenied, connect.CodePermissionDenied},
	{errdefs.ErrUnauthenticated, connect.CodeUnauthenticated},
	{errdefs.ErrUnavailable, connect.CodeUnavailable},
	{errdefs.ErrResourceExhausted, connect.CodeResourceExhausted},
}

// Code returns the Connect code of err's class: its reason's class first
// (an error may wrap several classes; the reason says which one it is),
// then the classes in errdefs.Classes order. An error of no class is
// CodeUnknown; an ended context is CodeCanceled or CodeDeadlineExceeded.
func Code(err error) connect.Code {
	class := errdefs.ClassOf(errdefs.ReasonError(errdefs.ReasonOf(err)))
	if class == nil {
		class = errdefs.ClassOf(err)
	}
	for _, c := range codes {
		if c.class == class {
			return c.code
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeUnknown
}

// ClassOf returns the class of code, nil for a code of no class.
func ClassOf(code connect.Code) error {
	for _, c := range codes {
		if c.code == code {
			return c.class
		}
	}
	return nil
}

// Encode returns err as a Connect error: the code of its class, its reason
// in the metadata and its text as the message. A Connect error (one the
// handler made itself) and nil are returned as they are.
func Encode(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	out := connect.NewError(Code(err), errors.New(err.Error()))
	if r := errdefs.ReasonOf(err); r != "" {
		out.Meta().Set(ReasonKey, string(r))
	}
	return out
}

// Error is an error a Connect peer answered: errors.Is matches its class
// and its reason, errdefs.ReasonOf finds the reason.
type Error struct {
	// Code is the Connect code the peer sent.
	Code connect.Code
	// Message is the peer's text of the error.
	Message string
	class   error
	reason  error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the reason's sentinel (which unwraps to its class) or the
// class, and the context error of CodeCanceled and CodeDeadlineExceeded.
func (e *Error) Unwrap() []error {
	var out []error
	if e.reason != nil {
		out = append(out, e.reason)
	}
	if e.class != nil {
		out = append(out, e.class)
	}
	switch e.Code {
	case connect.CodeCanceled:
		out = append(out, context.Canceled)
	case connect.CodeDeadlineExceeded:
		out = append(out, context.DeadlineExceeded)
	}
	return out
}

// Decode returns the error a Connect call ended with as an *Error of the
// class and reason the peer sent; an error that is no Connect error (the
// request could not be made) is returned as it is. nil is nil.
func Decode(err error) error {
	var ce *connect.Error
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	out := &Error{Code: ce.Code(), Message: ce.Message(), class: ClassOf(ce.Code())}
	if out.Message == "" {
		out.Message = ce.Error()
	}
	if r := ce.Meta().Get(ReasonKey); r != "" {
		if s := errdefs.ReasonError(errdefs.Reason(r)); s != nil && errors.Is(s, out.class) {
			out.reason = s
		}
	}
	return out
}

// Interceptor encodes the errors of a service's handlers (Encode), unary
// and streaming.
func Interceptor() connect.Interceptor { return interceptor{} }

type interceptor struct{}

func (interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if req.Spec().IsClient {
			return resp, err
		}
		return resp, Encode(err)
	}
}

func (interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return Encode(next(ctx, conn))
	}
}
