package apierr

import "github.com/spacesandbox/space/internal/errdefs"

// Status returns the control plane's status and code of err.
//
// Deprecated: use Encode, which gives the reason too.
func Status(err error) (int, string) {
	status, code, _ := Encode(ControlPlane, err)
	return status, code
}

// ClassOf returns the error of an API code.
//
// Deprecated: use Decode, which reads the reason too.
func ClassOf(code string) error { return errdefs.ClassOf(Decode(code, "")) }
