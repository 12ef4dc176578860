package errdefs

import (
	"errors"
	"fmt"
	"testing"
)

func TestClasses(t *testing.T) {
	classes := []struct {
		err error
		is  func(error) bool
	}{
		{ErrNotFound, IsNotFound},
		{ErrConflict, IsConflict},
		{ErrInvalidArgument, IsInvalidArgument},
		{ErrFailedPrecondition, IsFailedPrecondition},
		{ErrPermissionDenied, IsPermissionDenied},
		{ErrUnauthenticated, IsUnauthenticated},
		{ErrUnavailable, IsUnavailable},
		{ErrResourceExhausted, IsResourceExhausted},
	}
	for i, c := range classes {
		wrapped := fmt.Errorf("sandbox abc: pause: %w", fmt.Errorf("inner: %w", c.err))
		for j, other := range classes {
			if got, want := other.is(wrapped), i == j; got != want {
				t.Errorf("class %d check on wrapped %v = %v, want %v", j, c.err, got, want)
			}
		}
		if c.is(errors.New(c.err.Error())) {
			t.Errorf("%v matched by text alone", c.err)
		}
	}
}
