package btrfs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/testenv/swaprace"
)

// TestDeleteNestedSwapRace walks a volume for nested subvolumes to delete,
// as Delete does, over and over while a racer (its sandbox, in effect) swaps
// a directory of it with a symbolic link to another sandbox's volume, which
// holds a nested subvolume of its own: that one survives. A walk by path
// followed the swapped link, and "btrfs subvolume delete" of the joined path
// deleted the neighbour's subvolume (within a few hundred walks).
func TestDeleteNestedSwapRace(t *testing.T) {
	ctx := context.Background()
	d, err := New(loopback(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateTemplate(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	if err := d.SealTemplate(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	victim, err := d.Clone(ctx, "base", "victim")
	if err != nil {
		t.Fatal(err)
	}
	precious := filepath.Join(victim, "precious")
	if out, err := exec.Command("btrfs", "subvolume", "create", precious).CombinedOutput(); err != nil {
		t.Fatalf("create nested subvolume: %v: %s", err, out)
	}
	v, err := d.Clone(ctx, "base", "v")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(v, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := swaprace.Start(t, filepath.Join(v, "d"), victim)
	for round := range 3000 {
		_ = deleteNested(ctx, v) // a tree changing under the walk may be refused
		if _, err := os.Lstat(precious); err != nil {
			t.Fatalf("walk %d: the neighbour's subvolume %s is gone, deleted through the swapped link: %v", round, precious, err)
		}
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if r.Swaps() == 0 {
		t.Fatal("the racer never swapped: the race did not run")
	}
	for _, id := range []string{"v", "victim"} {
		if err := d.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}
