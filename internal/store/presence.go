package store

import (
	"context"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// A replica that dies holding leases would keep the others waiting for them
// to expire (the lease TTL). Presence lets the others tell a dead holder from
// a busy one at once: each replica holds its presence for its whole life on
// something the store ends by itself when the process dies (PostgreSQL: a
// session-level advisory lock, released when the server sees the session's
// connection close, as the kernel closes it for a killed process). A replica
// that finds a lease held by a holder that is not present takes it over with
// Leases.TakeOverLease, whose fencing token makes anything the former holder
// still does refused, so a wrong "absent" (a live replica whose presence
// connection broke) costs repeated work, never a double action.

// Presence is the optional ability of a Store shared by several replicas to
// say whether a replica's process is alive. SQLite does not implement it:
// one server owns the file, so there is nobody to take over from.
type Presence interface {
	// HoldPresence makes replica present until ctx is done, establishing
	// its presence again (with backoff) whenever it is lost, and returns nil
	// when ctx is done. It calls held(true, nil) each time replica becomes
	// present, and held(false, cause) each time it stops being present or
	// an attempt to become present fails; the calls come from one goroutine.
	HoldPresence(ctx context.Context, replica string, held func(present bool, cause error)) error
	// ReplicaPresent reports whether replica holds its presence now. false
	// means the store knows of no live process holding it; an error means
	// it cannot tell (and the caller must assume the replica is present).
	// A replica that has not held its presence yet, or whose software does
	// not hold one, is not present.
	ReplicaPresent(ctx context.Context, replica string) (bool, error)
}

// LeaseHeldError is the ErrConflict of AcquireLease on a lease another
// holder has live: it names the holder, so that a caller can ask whether
// it is present and take the lease over from it (TakeOverLease).
type LeaseHeldError struct {
	Name    string
	Holder  string
	Token   int64
	Expires time.Time
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("lease %s: held by %s (token %d) until %s: %v",
		e.Name, e.Holder, e.Token, e.Expires.Format(time.RFC3339Nano), errdefs.ErrConflict)
}

// Unwrap makes a LeaseHeldError an ErrConflict.
func (e *LeaseHeldError) Unwrap() error { return errdefs.ErrConflict }
