package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/imagebuild"
)

// The Dockerfile build's step cache (internal/imagebuild's cache.go) as
// `space template cache list|prune`, and the collection of unused image
// imports (imports.go) as `space template gc`.

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
	holders, err := imagebuild.Client{C: e.c}.Holders(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%-24s %-20s %-6s %s\n", "TEMPLATE", "HOLDER", "STEPS", "CREATED")
	for _, h := range holders {
		fmt.Fprintf(e.stdout, "%-24s %-20s %-6d %s\n", printable(h.Template), h.ID, h.CachedSteps(), h.Created.Format(time.RFC3339))
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
	b := imagebuild.Client{C: e.c}
	holders, err := b.Holders(ctx)
	if err != nil {
		return err
	}
	n, err := imagebuild.PruneHolders(ctx, b, holders, name, 0, "")
	fmt.Fprintf(e.stderr, "step cache: %d holder(s) deleted\n", n)
	return err
}

// templateGC runs `space template gc [--older-than DUR]`.
func templateGC(ctx context.Context, e *env, args []string) error {
	fs := newFlags("template gc")
	olderThan := durationFlag(fs, "older-than", imagebuild.ImportTTL, "delete only imports created longer ago than this")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 0, 0); err != nil {
		return err
	}
	got, err := imagebuild.CollectImports(ctx, imagebuild.Client{C: e.c}, *olderThan, time.Now(), "", e.stderr)
	for _, name := range got.Used {
		fmt.Fprintf(e.stderr, "base: kept import %s: sandboxes use it\n", name)
	}
	fmt.Fprintf(e.stderr, "template gc: %d import(s) deleted, %d in use kept\n", len(got.Deleted), len(got.Used))
	return err
}
