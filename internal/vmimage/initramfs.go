package vmimage

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spacesandbox/space/internal/guestinit"
)

// initramfsFormat names the layout BuildInitramfs writes; bump it when the
// layout changes so cached archives are rebuilt.
const initramfsFormat = "space-initramfs-v1"

// Boot is what QEMU needs to boot a guest: a kernel and an initramfs whose
// /init is space-guest.
type Boot struct {
	// Kernel is the guest kernel.
	Kernel *Kernel
	// Initrd is the host path of the initramfs (uncompressed newc cpio:
	// decompression is slow under TCG and the archive is small).
	Initrd string
}

// Prepare fetches the guest kernel and builds the initramfs for guestBinary,
// both cached under cacheDir by content hash.
func Prepare(ctx context.Context, cacheDir, guestBinary string) (*Boot, error) {
	k, err := FetchKernel(ctx, cacheDir)
	if err != nil {
		return nil, err
	}
	initrd, err := BuildInitramfs(k, guestBinary, cacheDir)
	if err != nil {
		return nil, err
	}
	return &Boot{Kernel: k, Initrd: initrd}, nil
}

// BuildInitramfs writes the initramfs for kernel k and the static guest
// binary to cacheDir/initramfs/<hash>.cpio, where the hash covers the layout
// version, the kernel package, the binary and the module list; an existing
// file with that name is reused. A kernel without a modules directory (the
// minimal kernel, everything built in) gets an empty module list.
func BuildInitramfs(k *Kernel, guestBinary, cacheDir string) (string, error) {
	var mods []Module
	if k.ModulesDir != "" {
		var err error
		if mods, err = ResolveModules(k.ModulesDir, GuestModules); err != nil {
			return "", fmt.Errorf("initramfs: %w", err)
		}
	}
	binSum, err := fileSHA256(guestBinary)
	if err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n", initramfsFormat, k.SHA256, binSum)
	for _, m := range mods {
		fmt.Fprintf(h, "%s\n", m.Name)
	}
	dir := filepath.Join(cacheDir, "initramfs")
	out := filepath.Join(dir, hex.EncodeToString(h.Sum(nil))+".cpio")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".build-")
	if err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := writeInitramfs(bw, guestBinary, mods); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	return out, nil
}

func writeInitramfs(w io.Writer, guestBinary string, mods []Module) error {
	c := NewCPIO(w)
	for _, d := range []string{"dev", "proc", "sys", "lib", "lib/modules", strings.TrimPrefix(guestinit.NewRoot, "/")} {
		if err := c.AddDir(d, 0o755); err != nil {
			return err
		}
	}
	// The kernel opens /dev/console for init's standard streams before
	// running it; devtmpfs mounted later hides this node, not the open fds.
	if err := c.AddCharDev("dev/console", 0o600, 5, 1); err != nil {
		return err
	}
	if err := c.AddHostFile("init", guestBinary, 0o755); err != nil {
		return err
	}
	var order strings.Builder
	modDir := strings.TrimPrefix(guestinit.ModulesDir, "/")
	for _, m := range mods {
		name := m.Name + ".ko"
		if err := c.AddHostFile(modDir+"/"+name, m.Path, 0o644); err != nil {
			return err
		}
		order.WriteString(name + "\n")
	}
	orderFile := strings.TrimPrefix(guestinit.ModuleOrderFile, "/")
	if err := c.AddFile(orderFile, 0o644, int64(order.Len()), strings.NewReader(order.String())); err != nil {
		return err
	}
	return c.Close()
}

// AddHostFile adds the regular file at hostPath as name.
func (c *CPIO) AddHostFile(name, hostPath string, perm uint32) error {
	f, err := os.Open(hostPath)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", hostPath)
	}
	return c.AddFile(name, perm, fi.Size(), f)
}
