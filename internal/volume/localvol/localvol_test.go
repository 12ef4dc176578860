package localvol

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
	"github.com/spacesandbox/space/internal/volume/btrfs"
)

func TestOpenLoopbackAndReuse(t *testing.T) {
	testenv.RequiresBtrfs(t)
	ctx := context.Background()
	dataDir := t.TempDir()
	cfg := Config{DataDir: dataDir, ImageSize: 256 << 20}
	s, err := Open(ctx, cfg, slog.Default())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Unmount(context.Background()) })
	if s.Name() != "btrfs" || !s.Loopback() || !btrfs.IsBtrfs(filepath.Join(dataDir, "volumes")) {
		t.Fatalf("Open on ext4 as root: backend %s loopback=%v, want btrfs on a loopback image", s.Name(), s.Loopback())
	}
	if _, err := s.CreateTemplate(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	if err := s.SealTemplate(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	// A restarted node-manager reopens the mounted store and finds its data.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(ctx, cfg, slog.Default())
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if got, err := s2.Templates(ctx); err != nil || len(got) != 1 || got[0] != "base" {
		t.Fatalf("Templates after reopen = %v, %v", got, err)
	}
	if err := s2.Unmount(ctx); err != nil {
		t.Fatalf("Unmount: %v", err)
	}
	if btrfs.IsBtrfs(filepath.Join(dataDir, "volumes")) {
		t.Error("still mounted after Unmount")
	}
	out, _ := exec.Command("losetup", "-j", filepath.Join(dataDir, "volumes.img")).Output()
	if strings.TrimSpace(string(out)) != "" {
		t.Errorf("loop device left attached: %s", out)
	}
	// The image keeps the data: mount it again.
	s3, err := Open(ctx, cfg, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Unmount(ctx)
	if got, _ := s3.Templates(ctx); len(got) != 1 {
		t.Errorf("Templates after remount = %v", got)
	}
}

func TestOpenCopyFallback(t *testing.T) {
	s, err := Open(context.Background(), Config{DataDir: t.TempDir(), NoLoopback: true}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != "copy" || s.Loopback() {
		t.Errorf("backend %s loopback=%v, want copy", s.Name(), s.Loopback())
	}
	if err := s.Unmount(context.Background()); err != nil {
		t.Errorf("Unmount of a copy store: %v", err)
	}
	if _, err := Open(context.Background(), Config{DataDir: "relative"}, slog.Default()); err == nil {
		t.Error("Open with a relative data dir: want an error")
	}
}

// TestDiskQuotaOption: a btrfs store bounds its volumes unless NoDiskQuota
// says to leave the filesystem's quotas alone; then Limit says it cannot.
func TestDiskQuotaOption(t *testing.T) {
	testenv.RequiresBtrfs(t)
	ctx := context.Background()
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprint("NoDiskQuota=", off), func(t *testing.T) {
			s, err := Open(ctx, Config{DataDir: t.TempDir(), ImageSize: 256 << 20, NoDiskQuota: off}, slog.Default())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Unmount(context.Background()) })
			if _, err := s.CreateTemplate(ctx, "base"); err != nil {
				t.Fatal(err)
			}
			if err := s.SealTemplate(ctx, "base"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Clone(ctx, "base", "v"); err != nil {
				t.Fatal(err)
			}
			err = s.Limit(ctx, "v", 64<<20)
			if off && !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("Limit with NoDiskQuota = %v, want ErrUnsupported", err)
			}
			if !off {
				if err != nil {
					t.Fatalf("Limit: %v", err)
				}
				if u, err := s.DiskUsage(ctx, "v"); err != nil || u.LimitBytes != 64<<20 {
					t.Errorf("DiskUsage = %+v, %v; want a 64 MiB limit", u, err)
				}
			}
			if err := s.Delete(ctx, "v"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
