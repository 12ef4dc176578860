package apierr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("x: %w", errdefs.ErrInvalidArgument), 400},
		{fmt.Errorf("x: %w", errdefs.ErrUnauthenticated), 401},
		{fmt.Errorf("x: %w", errdefs.ErrPermissionDenied), 403},
		{fmt.Errorf("x: %w", errdefs.ErrNotFound), 404},
		{fmt.Errorf("x: %w", errdefs.ErrConflict), 409},
		{fmt.Errorf("x: %w", errdefs.ErrFailedPrecondition), 409},
		{fmt.Errorf("x: %w", errdefs.ErrResourceExhausted), 503},
		{fmt.Errorf("x: %w", errdefs.ErrUnavailable), 503},
		{errors.New("no class"), 500},
	} {
		if got, code := Status(tc.err); got != tc.want || code == "" {
			t.Errorf("Status(%v) = %d %q, want %d", tc.err, got, code, tc.want)
		}
	}
}
