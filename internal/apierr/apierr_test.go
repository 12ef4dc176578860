package apierr

import (
	"errors"
	"fmt"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
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

// TestClassOf: every code an edge answers with maps back to its class;
// codes of no class give nil.
func TestClassOf(t *testing.T) {
	for _, c := range classes {
		if got := ClassOf(c.code); got == nil || (c.class != errdefs.ErrResourceExhausted && got != c.class) {
			t.Errorf("ClassOf(%q) = %v, want %v", c.code, got, c.class)
		}
	}
	if got := ClassOf(sandboxv1.CodeRateLimited); got != errdefs.ErrResourceExhausted {
		t.Errorf("ClassOf(rate_limited) = %v", got)
	}
	for _, code := range []string{sandboxv1.CodeInternal, "", "nonsense"} {
		if got := ClassOf(code); got != nil {
			t.Errorf("ClassOf(%q) = %v, want nil", code, got)
		}
	}
}
