package cli

import (
	"context"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	space "github.com/spacesandbox/space/sdk/go"

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
// cacheKeep holders per template name are kept; `space template cache
// prune` deletes them.

const (
	// cacheLabel is the metadata key of a cache holder; its value is the
	// template name whose build made it (a fork's holder inherits it).
	cacheLabel = "dockerfile-cache"
	// cacheKeep is how many holders a template name keeps.
	cacheKeep = 3
	// cacheTTL is a holder's lifetime: its timeout.
	cacheTTL = "168h"
	// cacheNamePrefix starts the name of a cached step's snapshot.
	cacheNamePrefix = "dfc-"
)

// cacheName is the snapshot name of step key key (64 hex digits): the
// prefix and the key's 256 bits in base 36, 50 characters, so the name
// holds the whole key, not a truncation of it, and fits a name's 63.
func cacheName(key string) (string, error) {
	n, ok := new(big.Int).SetString(key, 16)
	if !ok || len(key) != 64 {
		return "", fmt.Errorf("step key %q: want 64 hex digits", key)
	}
	s := n.Text(36)
	return cacheNamePrefix + strings.Repeat("0", 50-len(s)) + s, nil
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
		}
		keys[i] = dockerfile.StepKey(parent, in, content)
		parent = keys[i]
	}
	return keys, nil
}

// cacheEntry is a cached step's snapshot and the holder it belongs to.
type cacheEntry struct{ holder, snapshot string }

// cacheHolders lists the caller's cache holders, oldest first: its
// stopped sandboxes labelled cacheLabel (a build sandbox, running, is not
// one yet: its build may still fail and remove it). The server lists only
// the caller's tenant's sandboxes.
func cacheHolders(ctx context.Context, c *space.Client) ([]sandboxv1.Sandbox, error) {
	all, err := c.ListSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	var out []sandboxv1.Sandbox
	for _, sb := range all {
		if _, ok := sb.Metadata[cacheLabel]; ok && sb.State == sandboxv1.StateStopped {
			out = append(out, sb)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// cacheIndex maps the names of the ready cached-step snapshots of holders
// to where they are.
func cacheIndex(ctx context.Context, c *space.Client, holders []sandboxv1.Sandbox) (map[string]cacheEntry, error) {
	idx := map[string]cacheEntry{}
	for _, h := range holders {
		snaps, err := c.ListSnapshots(ctx, h.ID)
		if err != nil {
			return nil, fmt.Errorf("step cache: snapshots of %s: %w", h.ID, err)
		}
		for _, s := range snaps {
			if s.State != "ready" || s.Kind != sandboxv1.SnapshotDisk {
				continue
			}
			for _, n := range s.Names {
				if strings.HasPrefix(n, cacheNamePrefix) {
					idx[n] = cacheEntry{holder: h.ID, snapshot: s.ID}
				}
			}
		}
	}
	return idx, nil
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

// pruneHolders deletes the holders of template name beyond the newest
// keep (all with keep 0), except holder except; it returns how many it deleted.
func pruneHolders(ctx context.Context, e *env, holders []sandboxv1.Sandbox, name string, keep int, except string) (int, error) {
	var mine []sandboxv1.Sandbox
	for _, h := range holders {
		if (name == "" || h.Metadata[cacheLabel] == name) && h.ID != except {
			mine = append(mine, h)
		}
	}
	deleted := 0
	for i := 0; i < len(mine)-keep; i++ {
		if err := e.c.DeleteSandbox(ctx, mine[i].ID); err != nil {
			return deleted, fmt.Errorf("step cache: delete holder %s: %w", mine[i].ID, err)
		}
		deleted++
	}
	return deleted, nil
}

// keepHolder makes build sandbox id a cache holder: stopped, deleted
// after cacheTTL.
func keepHolder(ctx context.Context, c *space.Client, id string) error {
	if _, err := c.SetTimeout(ctx, id, cacheTTL); err != nil {
		return fmt.Errorf("step cache: holder %s: timeout: %w", id, err)
	}
	if _, err := c.StopSandbox(ctx, id); err != nil {
		return fmt.Errorf("step cache: holder %s: stop: %w", id, err)
	}
	if _, err := c.WaitForState(ctx, id, sandboxv1.StateStopped); err != nil {
		return fmt.Errorf("step cache: holder %s: stop: %w", id, err)
	}
	return nil
}

// templateCache runs `space template cache list|prune`.
func templateCache(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "list":
			return templateCacheList(ctx, e, args[1:])
		case "prune":
			return templateCachePrune(ctx, e, args[1:])
		}
	}
	return usagef(newFlags("template cache"), "want list or prune [NAME]")
}

// templateCacheList runs `space template cache list`.
func templateCacheList(ctx context.Context, e *env, args []string) error {
	fs := newFlags("template cache list")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 0, 0); err != nil {
		return err
	}
	holders, err := cacheHolders(ctx, e.c)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%-24s %-20s %-6s %s\n", "TEMPLATE", "HOLDER", "STEPS", "CREATED")
	for _, h := range holders {
		idx, err := cacheIndex(ctx, e.c, []sandboxv1.Sandbox{h})
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%-24s %-20s %-6d %s\n", printable(h.Metadata[cacheLabel]), h.ID, len(idx), h.CreatedAt.Format(time.RFC3339))
	}
	return nil
}

// templateCachePrune runs `space template cache prune [NAME]`.
func templateCachePrune(ctx context.Context, e *env, args []string) error {
	fs := newFlags("template cache prune")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 0, 1); err != nil {
		return err
	}
	name := ""
	if len(pos) == 1 {
		name = pos[0]
	}
	holders, err := cacheHolders(ctx, e.c)
	if err != nil {
		return err
	}
	n, err := pruneHolders(ctx, e, holders, name, 0, "")
	fmt.Fprintf(e.stderr, "step cache: %d holder(s) deleted\n", n)
	return err
}
