package btrfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Loopback is a btrfs filesystem in a sparse image file, mounted through a
// loop device: how a node whose data directory is on another filesystem still
// gets O(1) clones.
type Loopback struct {
	// Image is the image file's path.
	Image string
	// Mountpoint is where the filesystem is mounted.
	Mountpoint string
}

// MountLoopback mounts image on mountpoint, first creating a sparse image of
// size bytes and formatting it when image does not exist. When mountpoint is
// already a btrfs mount (a previous process left it mounted) it is reused.
func MountLoopback(ctx context.Context, image, mountpoint string, size int64) (*Loopback, error) {
	l := &Loopback{Image: image, Mountpoint: mountpoint}
	if err := os.MkdirAll(mountpoint, 0o700); err != nil {
		return nil, fmt.Errorf("btrfs loopback: create %s: %w", mountpoint, err)
	}
	if IsBtrfs(mountpoint) {
		return l, nil
	}
	if _, err := os.Stat(image); errors.Is(err, fs.ErrNotExist) {
		if err := format(ctx, image, size); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("btrfs loopback: %w", err)
	}
	if out, err := exec.CommandContext(ctx, "mount", "-t", "btrfs", "-o", "loop", image, mountpoint).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("btrfs loopback: mount %s on %s: %w: %s", image, mountpoint, err, strings.TrimSpace(string(out)))
	}
	return l, nil
}

func format(ctx context.Context, image string, size int64) error {
	if size < 256<<20 {
		return fmt.Errorf("btrfs loopback: image size %d bytes: want at least 256 MiB", size)
	}
	f, err := os.OpenFile(image, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("btrfs loopback: create %s: %w", image, err)
	}
	err = f.Truncate(size) // sparse: blocks are allocated as they are written
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(image)
		return fmt.Errorf("btrfs loopback: size %s: %w", image, err)
	}
	if out, err := exec.CommandContext(ctx, "mkfs.btrfs", "-q", image).CombinedOutput(); err != nil {
		os.Remove(image)
		return fmt.Errorf("btrfs loopback: mkfs.btrfs %s: %w: %s", image, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Unmount unmounts the filesystem and detaches its loop device. Unmounting
// what is not mounted is not an error.
func (l *Loopback) Unmount(ctx context.Context) error {
	if !IsBtrfs(l.Mountpoint) {
		return nil
	}
	devices := loopDevices(ctx, l.Image)
	if out, err := exec.CommandContext(ctx, "umount", l.Mountpoint).CombinedOutput(); err != nil {
		return fmt.Errorf("btrfs loopback: umount %s: %w: %s", l.Mountpoint, err, strings.TrimSpace(string(out)))
	}
	// mount -o loop sets autoclear, so the device usually detaches itself,
	// but the kernel does that asynchronously (and defers a detach of a
	// device still busy): detach what is left and wait a little for it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, dev := range devices {
			_ = exec.CommandContext(ctx, "losetup", "-d", dev).Run()
		}
		devices = loopDevices(ctx, l.Image)
		if len(devices) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("btrfs loopback: %s still attached to %v", l.Image, devices)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// loopDevices lists the loop devices backed by image.
func loopDevices(ctx context.Context, image string) []string {
	out, err := exec.CommandContext(ctx, "losetup", "-j", image).Output()
	if err != nil {
		return nil
	}
	var devs []string
	for _, line := range bytes.Split(out, []byte("\n")) {
		if dev, _, ok := bytes.Cut(line, []byte(":")); ok && bytes.HasPrefix(dev, []byte("/dev/")) {
			devs = append(devs, string(dev))
		}
	}
	return devs
}
