package reconcile

import (
	"context"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/sandbox"
)

// CAFunc returns the interception CA a start of sb's current execution
// carries (nil: none). It may give sb a CA first and store it, updating sb
// in place (Version included). An error makes the start wait and retry.
type CAFunc func(ctx context.Context, sb *sandbox.Sandbox) (*nodev1.SandboxCA, error)

// SetCA sets where each start's interception CA comes from (the server,
// which holds the key the CAs are sealed with). nil: starts carry no CA.
func (r *Reconciler) SetCA(f CAFunc) {
	if f == nil {
		r.ca.Store(nil)
		return
	}
	r.ca.Store(&f)
}
