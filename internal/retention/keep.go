package retention

import (
	"cmp"
	"slices"
	"time"
)

// Kind is the kind of a snapshot.
type Kind string

// The snapshot kinds.
const (
	// KindDisk is a point-in-time copy of the sandbox filesystem.
	KindDisk Kind = "disk"
	// KindFull is a checkpoint of the paused VM: memory, devices and disk.
	KindFull Kind = "full"
)

// Snapshot is what retention needs to know of a snapshot.
type Snapshot struct {
	ID        string
	Kind      Kind
	CreatedAt time.Time
	// Pinned snapshots are never pruned: the latest full snapshot crash
	// recovery needs, one a user named, one an operation is using.
	Pinned bool
}

// Keep decides which snapshots to keep at time now under policy p and
// returns the IDs of both sets, newest first (ties by ID), each ID once.
//
// Each kind is retained on its own (a disk snapshot never displaces a full
// one): for every tier, among the snapshots of the kind younger than the
// tier's For (snapshots dated in the future count as age zero), the newest of
// each Every-long bucket is kept. The newest snapshot of each kind and every
// pinned snapshot are always kept. When more than p.MaxCount are kept, the
// oldest that are neither pinned nor the newest of their kind are pruned
// until the cap is met. Keep is deterministic and idempotent: applying it to
// the kept set at the same now prunes nothing more. An invalid policy prunes
// nothing. IDs are expected to be unique; an ID listed twice is kept if
// either entry is.
func Keep(now time.Time, snaps []Snapshot, p Policy) (keep, prune []string) {
	sorted := slices.Clone(snaps)
	slices.SortStableFunc(sorted, newestFirst)
	kept := make([]bool, len(sorted))
	if p.Validate() != nil {
		for i := range kept {
			kept[i] = true
		}
		return split(sorted, kept)
	}
	must := make([]bool, len(sorted)) // kept whatever the cap
	newest := map[Kind]bool{}
	for i, s := range sorted {
		if s.Pinned || !newest[s.Kind] {
			must[i], kept[i] = true, true
		}
		newest[s.Kind] = true
	}
	for _, t := range p.Tiers {
		seen := map[bucketKey]bool{}
		for i, s := range sorted {
			if now.Sub(s.CreatedAt) >= t.For {
				continue
			}
			k := bucketKey{s.Kind, floorDiv(s.CreatedAt.UnixNano(), int64(t.Every))}
			if !seen[k] {
				seen[k], kept[i] = true, true
			}
		}
	}
	if p.MaxCount > 0 {
		applyCap(kept, must, p.MaxCount)
	}
	return split(sorted, kept)
}

type bucketKey struct {
	kind   Kind
	bucket int64
}

// applyCap unkeeps the oldest snapshots that are not a must until at most max
// are kept.
func applyCap(kept, must []bool, max int) {
	n := 0
	for _, k := range kept {
		if k {
			n++
		}
	}
	for i := len(kept) - 1; i >= 0 && n > max; i-- {
		if kept[i] && !must[i] {
			kept[i] = false
			n--
		}
	}
}

// split lists the IDs by decision, each once: an ID kept anywhere is kept.
func split(sorted []Snapshot, kept []bool) (keep, prune []string) {
	keepSet := map[string]bool{}
	for i, s := range sorted {
		if kept[i] {
			keepSet[s.ID] = true
		}
	}
	done := map[string]bool{}
	for _, s := range sorted {
		if done[s.ID] {
			continue
		}
		done[s.ID] = true
		if keepSet[s.ID] {
			keep = append(keep, s.ID)
		} else {
			prune = append(prune, s.ID)
		}
	}
	return keep, prune
}

func newestFirst(a, b Snapshot) int {
	if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// floorDiv divides rounding towards minus infinity, so buckets before the
// epoch are as long as the others.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
