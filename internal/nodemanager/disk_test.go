package nodemanager

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/privop"
	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/volume/btrfs"
)

// TestStartLimitsTheDisk: an execution started on a btrfs store gets its
// root volume limited at its disk size (the default without one), for a
// start from a template and from a snapshot alike, and its stats report it.
func TestStartLimitsTheDisk(t *testing.T) {
	testenv.RequiresBtrfs(t)
	ctx := context.Background()
	dir := t.TempDir()
	l, err := btrfs.MountLoopback(ctx, filepath.Join(dir, "img"), filepath.Join(dir, "mnt"), 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Unmount(context.Background()); err != nil {
			t.Errorf("Unmount: %v", err)
		}
	})
	vols, err := btrfs.NewWithConfig(filepath.Join(l.Mountpoint, "store"), btrfs.Config{Image: l.Image})
	if err != nil {
		t.Fatal(err)
	}
	if mode, why := vols.QuotaMode(); mode == "" {
		t.Fatalf("no quotas: %s", why)
	}
	guest := filepath.Join(dir, "space-guest")
	os.WriteFile(guest, []byte("#!/bin/true\n"), 0o755)
	drv := &pipeDriver{peers: map[string]*os.File{}}
	srv, err := NewServer(Config{
		Socket: filepath.Join(dir, "nm.sock"), GuestBinary: guest, Storage: vols,
		SnapshotDir: filepath.Join(dir, "snapshots"),
		Drivers:     map[string]driver.Driver{"ns": drv},
		Build:       func(context.Context, string, string, io.Writer) error { return nil },
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	c := privop.NewClient(filepath.Join(dir, "nm.sock"))
	for i := 0; ; i++ {
		if _, err := c.Hello(ctx); err == nil {
			break
		} else if i > 200 {
			t.Fatalf("node-manager not answering: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := c.EnsureTemplate(ctx, "minimal", "builtin:minimal"); err != nil {
		t.Fatal(err)
	}
	start := func(id string, diskMiB int, snapshot string) {
		t.Helper()
		_, ch, _, err := c.Start(ctx, privop.StartArgs{ExecID: id, SandboxID: "sb1", Template: "minimal", Runtime: "ns",
			Hostname: "sb1", CPUs: 1, MemoryMiB: 256, PidsMax: 256, DiskMiB: diskMiB, Snapshot: snapshot})
		if err != nil {
			t.Fatalf("Start %s: %v", id, err)
		}
		ch.Close()
		t.Cleanup(func() { _ = c.Cleanup(context.Background(), id, "ns") })
	}
	wantLimit := func(id string, want uint64) {
		t.Helper()
		st, err := c.Stats(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.DiskLimitBytes != want {
			t.Errorf("exec %s: disk limit %d bytes, want %d", id, st.DiskLimitBytes, want)
		}
	}
	start("sb1-g1-a", 64, "")
	wantLimit("sb1-g1-a", 64<<20)
	start("sb1-g1-b", 0, "")
	wantLimit("sb1-g1-b", privop.DefaultDiskMiB<<20)
	if _, err := c.Snapshot(ctx, privop.SnapshotArgs{SnapshotID: "snap1", ExecID: "sb1-g1-a", Runtime: "ns", Kind: privop.SnapshotDisk, SandboxID: "sb1", Template: "minimal"}); err != nil {
		t.Fatal(err)
	}
	start("sb1-g2-c", 32, "snap1")
	wantLimit("sb1-g2-c", 32<<20)
}
