package imagebuild

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/template/dockerfile"
)

// The Dockerfile build's step cache. After each step that changes the
// filesystem (RUN, COPY, ADD, WORKDIR) the build takes a disk snapshot of
// its build sandbox and names it after the step's key
// (dockerfile.StepKey: the parent's key, the instruction, the content of
// COPY sources), a named snapshot rather than metadata because a name is
// the server's own per-tenant unique index (no other tenant sees or
// resolves it, and naming a second snapshot moves the name, so a key
// never stands for two snapshots), and because the name goes with the
// snapshot: when the snapshot is deleted, so is its name.
//
// Snapshots live as long as their sandbox, so a successful build keeps its
// build sandbox, stopped, as the cache holder: metadata dockerfile-cache=NAME,
// a timeout of cacheTTL. A rebuild lists the tenant's holders, finds the
// last step whose key names a ready snapshot (a key covers every step
// before it, so that step's snapshot is the longest cached prefix), forks
// its holder from that snapshot and runs the steps after it. The last
// cacheKeep holders per template name and cacheKeepTenant of all names are
// kept (a build deletes the oldest beyond); PruneHolders deletes them
// (`space template cache prune`). Holders are stopped sandboxes, which the
// tenant's quota (running sandboxes, their memory and CPUs) does not
// count: a build needs one running sandbox of the quota, cached or not.

const (
	// CacheLabel is the metadata key of a cache holder; its value is the
	// template name whose build made it (a fork's holder inherits it).
	CacheLabel = "dockerfile-cache"
	// cacheKeep is how many holders a template name keeps.
	cacheKeep = 3
	// cacheKeepTenant is how many holders a tenant keeps, of all its
	// template names: the cache's own bound, as holders (stopped) do not
	// count toward the tenant's quota, which bounds running sandboxes.
	cacheKeepTenant = 16
	// cacheTTL is a holder's lifetime: its timeout.
	cacheTTL = "168h"
	// CacheNamePrefix starts the name of a cached step's snapshot.
	CacheNamePrefix = "dfc-"
)

// Cache is the step cache's store: a Backend that has one caches steps.
type Cache interface {
	// Holders lists the caller's cache holders, oldest first: its stopped
	// sandboxes labelled CacheLabel (a build sandbox, running, is not one
	// yet: its build may still fail and remove it), each with its ready
	// disk snapshots. Only the caller's tenant's are listed.
	Holders(ctx context.Context) ([]Holder, error)
	// KeepHolder makes build sandbox id a cache holder: stopped, deleted
	// after ttl.
	KeepHolder(ctx context.Context, id, ttl string) error
}

// Holder is a cache holder.
type Holder struct {
	ID string
	// Template is the name of the template whose build made it.
	Template string
	// Runtime is its runtime (vm or ns): a fork of it runs there.
	Runtime string
	Created time.Time
	// Snapshots maps the names of its ready disk snapshots to their ids.
	Snapshots map[string]string
}

// CachedSteps is how many cached steps h holds.
func (h Holder) CachedSteps() int {
	n := 0
	for name := range h.Snapshots {
		if strings.HasPrefix(name, CacheNamePrefix) {
			n++
		}
	}
	return n
}

// cacheName is the snapshot name of step key key (64 hex digits): the
// prefix and the key's 256 bits in base 36, 50 characters, so the name
// holds the whole key, not a truncation of it, and fits a name's 63.
func cacheName(key string) (string, error) {
	n, ok := new(big.Int).SetString(key, 16)
	if !ok || len(key) != 64 {
		return "", fmt.Errorf("step key %q: want 64 hex digits", key)
	}
	s := n.Text(36)
	return CacheNamePrefix + strings.Repeat("0", 50-len(s)) + s, nil
}

// changesFS reports whether a step changes the filesystem, so it has a
// cached snapshot; the others only change what later steps run with.
func changesFS(in dockerfile.Instruction) bool {
	switch in.Cmd {
	case "RUN", "COPY", "ADD", "WORKDIR":
		return true
	}
	return false
}

// stepKeys is every step's key, in order; a COPY or ADD key covers the
// content of its sources.
func stepKeys(df *dockerfile.File, contextDir string) ([]string, error) {
	keys := make([]string, len(df.Steps))
	parent := "FROM " + df.From
	for i, in := range df.Steps {
		var content string
		if in.Cmd == "COPY" || in.Cmd == "ADD" {
			var err error
			if content, err = dockerfile.ContentHash(contextDir, in.Args[:len(in.Args)-1]); err != nil {
				return nil, fmt.Errorf("line %d: %s: %w", in.Line, in.Cmd, err)
			}
			if in.Cmd == "ADD" {
				// An ADD extracts archives: its keys differ from those of
				// the builds that copied such a file as it was.
				content = "add-extracts\x00" + content
			}
		}
		keys[i] = dockerfile.StepKey(parent, in, content)
		parent = keys[i]
	}
	return keys, nil
}

// holdersOf is the holders of runtime rt, all of them for rt "": a fork
// keeps its holder's runtime, so a build asked to run in a vm must not
// continue from an ns holder's snapshot, nor the reverse.
func holdersOf(holders []Holder, rt string) []Holder {
	if rt == "" {
		return holders
	}
	var out []Holder
	for _, h := range holders {
		if h.Runtime == rt {
			out = append(out, h)
		}
	}
	return out
}

// cacheEntry is a cached step's snapshot and the holder it belongs to.
type cacheEntry struct{ holder, snapshot string }

// cacheIndex maps the names of the cached-step snapshots of holders to
// where they are.
func cacheIndex(holders []Holder) map[string]cacheEntry {
	idx := map[string]cacheEntry{}
	for _, h := range holders {
		for name, snap := range h.Snapshots {
			if strings.HasPrefix(name, CacheNamePrefix) {
				idx[name] = cacheEntry{holder: h.ID, snapshot: snap}
			}
		}
	}
	return idx
}

// cachedPrefix is how many leading steps the cache covers and the snapshot
// to start from: up to the last filesystem step whose key's name is in idx
// (its key covers all before it), and the steps after it that change
// nothing on disk. It is 0 when no filesystem step is cached.
func cachedPrefix(steps []dockerfile.Instruction, keys []string, idx map[string]cacheEntry) (int, cacheEntry) {
	n, from := 0, cacheEntry{}
	for i := len(steps) - 1; i >= 0; i-- {
		if !changesFS(steps[i]) {
			continue
		}
		name, err := cacheName(keys[i])
		if err != nil {
			continue
		}
		if e, ok := idx[name]; ok {
			n, from = i+1, e
			break
		}
	}
	if n == 0 {
		return 0, cacheEntry{}
	}
	for n < len(steps) && !changesFS(steps[n]) {
		n++
	}
	return n, from
}

// PruneHolders deletes the holders of template name (of every template
// with name "") beyond the newest keep (all with keep 0), except holder
// except; it returns how many it deleted.
func PruneHolders(ctx context.Context, b Backend, holders []Holder, name string, keep int, except string) (int, error) {
	return deleteHolders(ctx, b, toPrune(holders, name, keep, except))
}

// toPrune is the holders of template name (of every template with name
// "") beyond the newest keep of holders (oldest first), except holder
// except.
func toPrune(holders []Holder, name string, keep int, except string) []Holder {
	var mine []Holder
	for _, h := range holders {
		if (name == "" || h.Template == name) && h.ID != except {
			mine = append(mine, h)
		}
	}
	if len(mine) <= keep {
		return nil
	}
	return mine[:len(mine)-keep]
}

// afterBuild is the holders a successful build of template name whose
// sandbox became holder id deletes, of the tenant's holders before it
// (oldest first): those of name beyond the newest cacheKeep, then the
// oldest of any name beyond cacheKeepTenant, the new one counted in both.
func afterBuild(holders []Holder, name, id string) []Holder {
	gone := toPrune(holders, name, cacheKeep-1, id)
	var rest []Holder
	for _, h := range holders {
		if !slices.ContainsFunc(gone, func(g Holder) bool { return g.ID == h.ID }) {
			rest = append(rest, h)
		}
	}
	return append(gone, toPrune(rest, "", cacheKeepTenant-1, id)...)
}

func deleteHolders(ctx context.Context, b Backend, hs []Holder) (int, error) {
	deleted := 0
	for _, h := range hs {
		if err := b.DeleteSandbox(ctx, h.ID); err != nil {
			return deleted, fmt.Errorf("step cache: delete holder %s: %w", h.ID, err)
		}
		deleted++
	}
	return deleted, nil
}

// cacheStep takes the cached snapshot of a step: a disk snapshot named
// after its key.
func cacheStep(ctx context.Context, b Backend, id, key string) error {
	name, err := cacheName(key)
	if err != nil {
		return err
	}
	if _, err := b.Snapshot(ctx, id, name); err != nil {
		return fmt.Errorf("step cache: %w", err)
	}
	return nil
}
