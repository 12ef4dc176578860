// Package localvol opens a node's volume store in its data directory, picking
// the best backend the host allows:
//
//  1. DATA/volumes already on btrfs (a btrfs data disk, or the loopback image
//     a previous node-manager left mounted): the btrfs driver.
//  2. root with btrfs-progs and kernel support: a sparse image DATA/volumes.img
//     (created and formatted on first use) mounted with -o loop on
//     DATA/volumes, and the btrfs driver.
//  3. otherwise the copy driver, with a warning: clones are full copies (or
//     reflinks) instead of O(1) snapshots.
//
// It is its own package because it imports both drivers, which import the
// volume contract.
package localvol

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spacesandbox/space/internal/volume"
	"github.com/spacesandbox/space/internal/volume/btrfs"
	copyvol "github.com/spacesandbox/space/internal/volume/copy"
)

// DefaultImageSize is the loopback image's apparent size; it is sparse, so it
// only takes the space written.
const DefaultImageSize = 32 << 30

// Config says where and how to open the store.
type Config struct {
	// DataDir is the node's data directory.
	DataDir string
	// ImageSize is the loopback image's size in bytes; default DefaultImageSize.
	ImageSize int64
	// NoDiskQuota leaves a btrfs store's quotas as they are: volumes are
	// not bounded (btrfs.Config.NoQuota).
	NoDiskQuota bool
	// NoLoopback skips step 2 (the copy driver is used unless DATA/volumes is
	// already on btrfs).
	NoLoopback bool
}

// Store is an opened volume store.
type Store struct {
	volume.Driver
	// Dir is the store's root, DATA/volumes.
	Dir string
	// loop is the loopback filesystem, when the store lives on one.
	loop *btrfs.Loopback
}

// Open opens the store for cfg.DataDir.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Store, error) {
	if cfg.DataDir == "" || !filepath.IsAbs(cfg.DataDir) {
		return nil, fmt.Errorf("volume store: data dir %q must be an absolute path", cfg.DataDir)
	}
	if cfg.ImageSize == 0 {
		cfg.ImageSize = DefaultImageSize
	}
	dir := filepath.Join(cfg.DataDir, "volumes")
	image := filepath.Join(cfg.DataDir, "volumes.img")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("volume store: %w", err)
	}
	if btrfs.IsBtrfs(dir) {
		s := &Store{Dir: dir}
		if _, err := os.Stat(image); err == nil {
			s.loop = &btrfs.Loopback{Image: image, Mountpoint: dir}
		}
		return s.withBtrfs(log, "existing btrfs", cfg)
	}
	if reason := loopbackUnavailable(cfg); reason != "" {
		log.Warn("volume store: using the copy driver; clones are full copies and slower", "dir", dir, "why not btrfs", reason)
		return openCopy(dir)
	}
	loop, err := btrfs.MountLoopback(ctx, image, dir, cfg.ImageSize)
	if err != nil {
		log.Warn("volume store: btrfs loopback failed; using the copy driver, clones are slower", "dir", dir, "err", err)
		return openCopy(dir)
	}
	s := &Store{Dir: dir, loop: loop}
	return s.withBtrfs(log, "btrfs loopback "+image, cfg)
}

func (s *Store) withBtrfs(log *slog.Logger, how string, c Config) (*Store, error) {
	cfg := btrfs.Config{NoQuota: c.NoDiskQuota}
	if s.loop != nil {
		cfg.Image = s.loop.Image
	}
	d, err := btrfs.NewWithConfig(s.Dir, cfg)
	if err != nil {
		return nil, fmt.Errorf("volume store: %w", err)
	}
	s.Driver = d
	if mode, why := d.QuotaMode(); mode == "" {
		log.Warn("volume store: no btrfs quotas; sandboxes' disk_mib is not enforced", "dir", s.Dir, "why", why)
	} else {
		log.Info("volume store opened", "dir", s.Dir, "backend", how, "quotas", mode)
		return s, nil
	}
	log.Info("volume store opened", "dir", s.Dir, "backend", how)
	return s, nil
}

func openCopy(dir string) (*Store, error) {
	d, err := copyvol.New(dir)
	if err != nil {
		return nil, fmt.Errorf("volume store: %w", err)
	}
	return &Store{Driver: d, Dir: dir}, nil
}

// loopbackUnavailable says why a loopback btrfs cannot be set up, or "".
func loopbackUnavailable(cfg Config) string {
	if cfg.NoLoopback {
		return "loopback disabled by configuration"
	}
	if os.Geteuid() != 0 {
		return "not root (mounting a loopback image needs root)"
	}
	for _, tool := range []string{"mkfs.btrfs", "btrfs", "mount", "umount", "losetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " not found (apt-get install btrfs-progs util-linux)"
		}
	}
	return ""
}

// Limit bounds volume id when the store's driver can (volume.Limiter); a
// store that cannot answers an error wrapping errors.ErrUnsupported.
func (s *Store) Limit(ctx context.Context, id string, bytes uint64) error {
	l, ok := s.Driver.(volume.Limiter)
	if !ok {
		return fmt.Errorf("volume store: %s volumes cannot be bounded: %w", s.Name(), errors.ErrUnsupported)
	}
	return l.Limit(ctx, id, bytes)
}

// DiskUsage reports volume id's charged space when the store's driver
// accounts it (volume.DiskUser); otherwise an error wrapping
// errors.ErrUnsupported.
func (s *Store) DiskUsage(ctx context.Context, id string) (volume.DiskUsage, error) {
	du, ok := s.Driver.(volume.DiskUser)
	if !ok {
		return volume.DiskUsage{}, fmt.Errorf("volume store: %s volumes are not accounted: %w", s.Name(), errors.ErrUnsupported)
	}
	return du.DiskUsage(ctx, id)
}

// Loopback reports whether the store lives on a loopback image this package
// manages.
func (s *Store) Loopback() bool { return s.loop != nil }

// Close releases the Store and leaves the filesystem mounted, so running
// sandboxes keep their roots and the next Open reuses the mount.
func (s *Store) Close() error { return nil }

// Unmount unmounts a loopback store and detaches its loop device (for tests
// and node decommissioning). Other stores are left alone.
func (s *Store) Unmount(ctx context.Context) error {
	if s.loop == nil {
		return nil
	}
	if err := s.loop.Unmount(ctx); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("volume store: %w", err)
	}
	return nil
}
