package reconcile

import (
	"context"

	"github.com/spacesandbox/space/internal/sandbox"
)

// DeleteFunc removes what the control plane keeps for sandbox sb outside
// its row (its header rules, service.Credentials.PurgeHeaderRules). An
// error makes the delete wait and retry, so that nothing outlives the row.
type DeleteFunc func(ctx context.Context, sb *sandbox.Sandbox) error

// SetOnDelete sets what each delete runs after the execution is stopped
// and before the row is removed. nil: nothing.
func (r *Reconciler) SetOnDelete(f DeleteFunc) {
	if f == nil {
		r.onDelete.Store(nil)
		return
	}
	r.onDelete.Store(&f)
}
