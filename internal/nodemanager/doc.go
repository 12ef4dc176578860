// Package nodemanager is the server side of the node-manager, the only root
// process on a node (cmd/space-node-manager): it answers the fixed list of
// operations of internal/privop over a unix socket — materialise a
// template, start, kill and clean up a sandbox execution, pause and resume,
// stats, snapshots and their export — and checks every field of every
// request, and the caller's uid with SO_PEERCRED, before it acts. The
// unprivileged sandbox manager (internal/node) is its only client, and links
// only internal/privop (the wire types and the client), not this package.
package nodemanager

import (
	"fmt"

	"github.com/spacesandbox/space/internal/errdefs"
)

// invalid is an ErrInvalidArgument error: a request the server refuses.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errdefs.ErrInvalidArgument}, args...)...)
}
