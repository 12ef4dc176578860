package s3store

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/minio/minio-go/v7"

	"github.com/spacesandbox/space/internal/errdefs"
)

// classify turns an error of minio-go into an error of the objstore
// contract's classes. parent is the caller's context: when it is done its
// error is returned (so errors.Is(err, context.Canceled) holds); a deadline
// of the driver's own (OpTimeout) is ErrUnavailable.
func (s *Store) classify(parent context.Context, op, key string, err error) error {
	what := "s3 store " + s.cfg.describe() + ": " + op
	if key != "" {
		what += " " + key
	}
	if cerr := parent.Err(); cerr != nil {
		return fmt.Errorf("%s: %w", what, cerr)
	}
	for _, class := range []error{errdefs.ErrInvalidArgument, errdefs.ErrUnavailable, errdefs.ErrFailedPrecondition} {
		if errors.Is(err, class) {
			return fmt.Errorf("%s: %w", what, err) // ours, already classified
		}
	}
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) || (resp.Code == "" && resp.StatusCode == 0) {
		// No answer from the server: connection refused or reset, DNS,
		// timeouts (ours or the transport's), a body cut short.
		return fmt.Errorf("%s: server unreachable: %v: %w", what, err, errdefs.ErrUnavailable)
	}
	code := resp.Code
	switch code {
	case "NoSuchKey", "NoSuchUpload":
		return fmt.Errorf("%s: %w", what, errdefs.ErrNotFound)
	case "NoSuchBucket":
		return fmt.Errorf("%s: bucket %s does not exist: %w", what, s.cfg.Bucket, errdefs.ErrFailedPrecondition)
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired",
		"AuthorizationHeaderMalformed", "MissingSecurityHeader", "InvalidSecurity",
		"XAdminUserNotFound": // versitygw's answer (404) to an unknown access key
		return fmt.Errorf("%s: the server refused the credentials (%s): check %s, %s and %s: %w",
			what, code, envAccessKey, envSecretKey, envSessionToken, errdefs.ErrUnauthenticated)
	case "AccessDenied", "AllAccessDisabled", "AccountProblem":
		return fmt.Errorf("%s: access denied (%s): the credentials in %s/%s lack permission on bucket %s: %w",
			what, code, envAccessKey, envSecretKey, s.cfg.Bucket, errdefs.ErrPermissionDenied)
	case "QuotaExceeded", "EntityTooLarge", "StorageFull", "XMinioStorageFull":
		return fmt.Errorf("%s: %s: %w", what, code, errdefs.ErrResourceExhausted)
	case "PreconditionFailed":
		return fmt.Errorf("%s: %s: %w", what, code, errdefs.ErrFailedPrecondition)
	}
	switch st := resp.StatusCode; {
	case st >= 500, st == http.StatusTooManyRequests, st == http.StatusRequestTimeout:
		return fmt.Errorf("%s: server error %d %s: %w", what, st, code, errdefs.ErrUnavailable)
	case st == http.StatusNotFound:
		return fmt.Errorf("%s: %w", what, errdefs.ErrNotFound)
	case st == http.StatusForbidden:
		return fmt.Errorf("%s: forbidden (%s): check %s and %s: %w", what, code, envAccessKey, envSecretKey, errdefs.ErrPermissionDenied)
	}
	// Another refusal: the server does not support what we asked, or the
	// store is misconfigured. Retrying will not help.
	return fmt.Errorf("%s: server refused: %d %.60q %.200q: %w", what, resp.StatusCode, code, resp.Message, errdefs.ErrFailedPrecondition)
}

// isCode reports whether err is the server's answer code.
func isCode(err error, code string) bool {
	var resp minio.ErrorResponse
	return errors.As(err, &resp) && resp.Code == code
}
