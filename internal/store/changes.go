package store

import (
	"context"

	"github.com/spacesandbox/space/internal/sandbox"
)

// SandboxChanges is the optional ability of a store shared by several
// control-plane replicas to announce that a sandbox changed, whichever replica
// changed it, so that the others need not poll to learn it. A store that
// serves one process only (SQLite) does not implement it; callers probe for it
// with a type assertion.
type SandboxChanges interface {
	// WatchSandboxChanges calls changed with the id of each sandbox created,
	// updated or deleted, by any process, until ctx is done; then it
	// returns nil. An id may be announced more than once for one change and
	// one announcement may stand for several changes: it says only "read
	// this sandbox again". Ids are checked (sandbox.ValidID) before they are
	// passed on.
	//
	// Announcements can be lost when the connection they travel on breaks.
	// missed is therefore called each time watching (re)starts — first
	// with a nil cause, then with the error that interrupted it — and the
	// caller must then look at every sandbox it cares about as if all had
	// changed. While watching is impossible (the database unreachable) the
	// method keeps retrying with backoff and announces nothing.
	//
	// changed and missed are called from one goroutine, one call at a time,
	// and must not block for long: announcements queue up behind them.
	WatchSandboxChanges(ctx context.Context, changed func(id string), missed func(cause error)) error
}

// SandboxEvents is the optional ability of a store to write a sandbox and the
// events that say what happened to it in one transaction: one commit where a
// create or a settled state would otherwise take one per row (the SQL stores
// have it). Callers probe for it with a type assertion and otherwise write
// the sandbox, then append the events.
type SandboxEvents interface {
	// CreateSandboxWithinQuotaAndEvents is CreateSandboxWithinQuota and, in
	// the same transaction, AppendEvent of each event (all naming sb), in
	// order: all of it is written or nothing. It sets each event's Seq.
	CreateSandboxWithinQuotaAndEvents(ctx context.Context, sb *sandbox.Sandbox, events []Event) error
	// UpdateSandboxAndEvents is UpdateSandbox with the events as above; a
	// version conflict writes no event.
	UpdateSandboxAndEvents(ctx context.Context, sb *sandbox.Sandbox, events []Event) error
}
