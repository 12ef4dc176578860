package btrfs

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/volume"
	"github.com/spacesandbox/space/internal/volume/volumetest"
)

// loopback mounts a fresh btrfs image from t.TempDir and unmounts it (and
// detaches its loop device) when the test ends.
func loopback(t *testing.T) string {
	t.Helper()
	testenv.RequiresBtrfs(t)
	dir := t.TempDir()
	l, err := MountLoopback(context.Background(), filepath.Join(dir, "img"), filepath.Join(dir, "mnt"), 256<<20)
	if err != nil {
		t.Fatalf("MountLoopback: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Unmount(context.Background()); err != nil {
			t.Errorf("Unmount: %v", err)
		}
		if devs := loopDevices(context.Background(), l.Image); len(devs) > 0 {
			t.Errorf("loop devices left: %v", devs)
		}
	})
	return l.Mountpoint
}

func TestConformance(t *testing.T) {
	volumetest.Run(t, func(t *testing.T) volume.Driver {
		d, err := New(filepath.Join(loopback(t), "store"))
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

func TestDeleteNestedSubvolume(t *testing.T) {
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
	v, err := d.Clone(ctx, "base", "v")
	if err != nil {
		t.Fatal(err)
	}
	// A sandbox may create subvolumes inside its root.
	if out, err := exec.Command("btrfs", "subvolume", "create", filepath.Join(v, "inner")).CombinedOutput(); err != nil {
		t.Fatalf("create nested subvolume: %v: %s", err, out)
	}
	if err := d.Delete(ctx, "v"); err != nil {
		t.Fatalf("Delete with a nested subvolume: %v", err)
	}
	out, _ := exec.Command("btrfs", "subvolume", "list", d.layout.Root).CombinedOutput()
	if strings.Contains(string(out), "volumes/v") {
		t.Errorf("subvolumes left:\n%s", out)
	}
}

func TestNewRefusesOtherFilesystems(t *testing.T) {
	dir := t.TempDir()
	if IsBtrfs(dir) {
		t.Skip("skipping: the temp dir is itself on btrfs")
	}
	if _, err := New(dir); err == nil {
		t.Fatal("New on a non-btrfs directory: want an error")
	}
}
