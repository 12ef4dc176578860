package guestd

import (
	"context"
	"errors"
	"io/fs"
	"net/http"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
)

// errBadRequest marks errors caused by the request itself.
var errBadRequest = errors.New("bad request")

// codeOf classifies err into the Connect code the host sees.
func codeOf(err error) connect.Code {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return ce.Code()
	case errors.Is(err, errBadPath), errors.Is(err, errBadRequest), errors.Is(err, errBadPageToken),
		errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EISDIR),
		errors.Is(err, unix.ENAMETOOLONG), errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOEXEC):
		return connect.CodeInvalidArgument
	case errors.Is(err, fs.ErrNotExist):
		return connect.CodeNotFound
	case errors.Is(err, fs.ErrExist), errors.Is(err, unix.ENOTEMPTY):
		return connect.CodeAlreadyExists
	case errors.Is(err, fs.ErrPermission), errors.Is(err, unix.EROFS):
		return connect.CodePermissionDenied
	case errors.Is(err, errUnknownUser):
		return connect.CodeUnauthenticated
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT), errors.Is(err, unix.EMFILE),
		errors.Is(err, unix.ENFILE), errors.Is(err, unix.EAGAIN), errors.Is(err, errTooMany):
		return connect.CodeResourceExhausted
	}
	return connect.CodeInternal
}

// rpcError wraps err as a Connect error with the code that fits it.
func rpcError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	return connect.NewError(codeOf(err), err)
}

// httpStatus maps err to the HTTP status of the /files endpoint (envd's).
func httpStatus(err error) int {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return http.StatusInsufficientStorage
	}
	switch codeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeAlreadyExists:
		return http.StatusBadRequest
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

// errTooMany reports that a daemon limit is reached.
var errTooMany = errors.New("limit reached")

// contextError reports why ctx ended with the matching Connect code
// (connect.CodeOf gives Unknown for plain context errors).
func contextError(ctx context.Context) error {
	code := connect.CodeCanceled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = connect.CodeDeadlineExceeded
	}
	return connect.NewError(code, ctx.Err())
}
