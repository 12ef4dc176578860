package guestd

import (
	"context"
	"errors"
	"runtime"
	"testing"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
)

// TestListDirBounded lists a directory far larger than the listing limit:
// the answer is refused as too many, and reaching that answer reads the
// directory only as far as the limit (measured as bytes allocated, not time:
// reading all 50,000 entries allocates megabytes, a bounded read a few
// hundred KiB). A million-entry directory is the same at twenty times the
// size.
func TestListDirBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 50,000 files")
	}
	const files, limit = 50_000, 1000
	dir := memDir(t)
	makeFiles(t, dir, files)
	db := &accountDB{}
	ctx := context.Background()

	var small []*filesystemv1.EntryInfo
	if err := listTree(ctx, dir, 1, db, false, &small, files); err != nil || len(small) != files {
		t.Fatalf("listing %d entries with room for all: %d entries, %v", files, len(small), err)
	}
	for i := 1; i < len(small); i++ {
		if small[i-1].GetName() >= small[i].GetName() {
			t.Fatalf("listing not sorted by name at %d: %q before %q", i, small[i-1].GetName(), small[i].GetName())
		}
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var out []*filesystemv1.EntryInfo
	err := listTree(ctx, dir, 1, db, false, &out, limit)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errTooMany) {
		t.Fatalf("listing %d entries with a limit of %d: %v, want errTooMany", files, limit, err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("refusing the listing allocated %d KiB", alloc>>10)
	if alloc > 2<<20 {
		t.Errorf("refusing a %d-entry directory over a %d limit allocated %d KiB: it read the whole directory, want at most 2048 KiB", files, limit, alloc>>10)
	}
}
