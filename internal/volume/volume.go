// Package volume is the node's storage contract: templates (root filesystems
// filled once, then sealed read-only) and volumes (a sandbox execution's
// writable root, a copy-on-write clone of a template).
//
// A volume can be snapshotted (a read-only point-in-time copy that outlives it)
// and a snapshot cloned into a new volume: that is how a sandbox's disk
// survives a stop, a rollback or a fork on the node.
//
// Implementations: volume/btrfs (subvolumes and snapshots: a clone is O(1)),
// volume/copy (plain directories and cp --reflink=auto: the slower fallback for
// hosts without btrfs). volume/localvol picks one for a data directory;
// volume/volumetest is the conformance suite both pass.
package volume

import (
	"context"
	"fmt"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Driver stores templates and volumes. Names of both are validated with
// ValidName; every method is safe for concurrent use on different names.
type Driver interface {
	// Name is the backend's name ("btrfs", "copy").
	Name() string
	// CreateTemplate makes an empty, writable template directory for the
	// caller to fill and returns its path. An existing name gives Conflict.
	CreateTemplate(ctx context.Context, name string) (string, error)
	// SealTemplate makes a filled template read-only; only sealed templates
	// can be cloned. Sealing twice is a no-op.
	SealTemplate(ctx context.Context, name string) error
	// DeleteTemplate removes a template, sealed or not. Existing clones are
	// unaffected. A missing template is not an error.
	DeleteTemplate(ctx context.Context, name string) error
	// Templates lists the sealed templates, sorted.
	Templates(ctx context.Context) ([]string, error)
	// Clone makes volume id, a writable copy of a sealed template, and returns
	// its path. Symbolic links in the template are copied as links, never
	// followed. A missing template gives NotFound, an unsealed one
	// FailedPrecondition, an existing id Conflict.
	Clone(ctx context.Context, template, id string) (string, error)
	// Delete removes volume id; a missing volume is not an error.
	Delete(ctx context.Context, id string) error
	// Snapshot makes snap, a read-only point-in-time copy of volume id, and
	// returns its path. A missing volume gives NotFound, an existing snap
	// Conflict. The snapshot outlives the volume.
	Snapshot(ctx context.Context, id, snap string) (string, error)
	// CloneSnapshot makes volume id, a writable copy of snapshot snap, and
	// returns its path. The snapshot is left as it was, so it can be cloned
	// again (rollback to the same point twice).
	CloneSnapshot(ctx context.Context, snap, id string) (string, error)
	// DeleteSnapshot removes snapshot snap; a missing one is not an error.
	DeleteSnapshot(ctx context.Context, snap string) error
	// Snapshots lists the snapshots, sorted.
	Snapshots(ctx context.Context) ([]string, error)
	// Volumes lists the volumes, sorted.
	Volumes(ctx context.Context) ([]string, error)
	// Usage reports the capacity of the storage backing the driver.
	Usage(ctx context.Context) (Usage, error)
}

// Limiter is implemented by drivers that can bound the space one volume
// takes (btrfs, with quota groups). The node-manager calls Limit right after
// it makes a sandbox's volume (Clone, CloneSnapshot) and before anything
// runs on it; writes past the limit fail with EDQUOT (or ENOSPC) in that
// volume only. Drivers without it leave volumes unbounded.
type Limiter interface {
	// Limit caps what volume id may write at bytes. A missing volume gives
	// NotFound; a store with no room for another volume ResourceExhausted.
	Limit(ctx context.Context, id string, bytes uint64) error
}

// DiskUser is implemented by drivers that account each volume's space
// (btrfs with quota groups): what the volume has written and its limit.
type DiskUser interface {
	// DiskUsage reports volume id's accounted bytes and its limit (0 when
	// it has none). A missing volume gives NotFound.
	DiskUsage(ctx context.Context, id string) (DiskUsage, error)
}

// DiskUsage is the space one volume is charged for.
type DiskUsage struct {
	// UsedBytes is what the volume is charged: the data and metadata it
	// wrote, including what its snapshots still hold (btrfs simple quotas
	// charge an extent to the volume that wrote it for as long as any
	// snapshot or clone refers to it).
	UsedBytes uint64
	// LimitBytes is the volume's limit, 0 when unlimited.
	LimitBytes uint64
}

// Usage is the capacity of a volume store's filesystem.
type Usage struct {
	// TotalBytes is the filesystem size.
	TotalBytes uint64
	// FreeBytes is what unprivileged writers can still use.
	FreeBytes uint64
}

// ValidName reports whether s may name a template or a volume: 1 to 128
// characters from [a-z0-9._-], starting with a letter or digit (so never "."
// or ".." and never hidden).
func ValidName(s string) error {
	if len(s) == 0 || len(s) > 128 {
		return fmt.Errorf("%w: volume name %q: want 1 to 128 characters", errdefs.ErrInvalidArgument, s)
	}
	for i, c := range []byte(s) {
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '-' && c != '_' && c != '.') {
			return fmt.Errorf("%w: volume name %q: only a-z, 0-9, and (not first) . _ - are allowed", errdefs.ErrInvalidArgument, s)
		}
	}
	return nil
}
