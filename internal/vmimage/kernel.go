package vmimage

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// KernelMetapackage is Debian's package that always depends on the current
// cloud kernel; its dependency names the versioned kernel package to fetch.
const KernelMetapackage = "linux-image-cloud-amd64"

// Kernel is an unpacked guest kernel package in the cache.
type Kernel struct {
	// Package is the Debian package (linux-image-<release>-cloud-amd64).
	Package string
	// Release is the kernel release, what uname -r prints in the guest.
	Release string
	// SHA256 names the kernel's content and its cache directory: for a
	// package kernel the digest of the .deb, from the archive's index and
	// checked against the downloaded file; for a built minimal kernel its
	// build key (MinimalKernelKey).
	SHA256 string
	// Vmlinuz is the host path of the kernel image.
	Vmlinuz string
	// ModulesDir is the host path of lib/modules/<Release>; empty for a
	// kernel with everything built in.
	ModulesDir string
	// Minimal marks the kernel built by BuildMinimalKernel: no modules,
	// virtio over MMIO with the devices named on the kernel command line,
	// no PCI or ACPI. It boots on QEMU's microvm machine, not on q35.
	Minimal bool
}

// FetchKernel returns the guest kernel, downloading and unpacking it into
// cacheDir/kernel/<sha256 of the .deb> unless it is there already. It uses
// the system package manager (apt-cache, apt-get download, dpkg-deb); the
// package lists must be current (apt-get update) on a fresh host.
func FetchKernel(ctx context.Context, cacheDir string) (*Kernel, error) {
	pkg, err := kernelPackage(ctx)
	if err != nil {
		return nil, err
	}
	sum, err := packageSHA256(ctx, pkg)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cacheDir, "kernel", sum)
	if k, err := loadKernel(pkg, sum, dir); err == nil {
		return k, nil
	}
	if err := unpackKernel(ctx, pkg, sum, cacheDir, dir); err != nil {
		return nil, fmt.Errorf("guest kernel %s: %w", pkg, err)
	}
	return loadKernel(pkg, sum, dir)
}

// kernelPackage asks apt which versioned package the metapackage depends on.
func kernelPackage(ctx context.Context) (string, error) {
	out, err := run(ctx, "", "apt-cache", "depends", KernelMetapackage)
	if err != nil {
		return "", fmt.Errorf("guest kernel: %w (run apt-get update first)", err)
	}
	for _, line := range strings.Split(out, "\n") {
		dep, ok := strings.CutPrefix(strings.TrimSpace(line), "Depends: ")
		if ok && strings.HasPrefix(dep, "linux-image-") && validPackageName(dep) {
			return dep, nil
		}
	}
	return "", fmt.Errorf("guest kernel: apt-cache depends %s names no linux-image package (run apt-get update)", KernelMetapackage)
}

// packageSHA256 reads the candidate version's SHA256 from the apt index.
func packageSHA256(ctx context.Context, pkg string) (string, error) {
	out, err := run(ctx, "", "apt-cache", "show", "--no-all-versions", pkg)
	if err != nil {
		return "", fmt.Errorf("guest kernel %s: %w", pkg, err)
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "SHA256: "); ok && len(strings.TrimSpace(v)) == 64 {
			v = strings.TrimSpace(v)
			if _, err := hex.DecodeString(v); err == nil {
				return v, nil
			}
		}
	}
	return "", fmt.Errorf("guest kernel %s: apt-cache show gives no SHA256", pkg)
}

// unpackKernel downloads the package into a temporary directory beside dir,
// checks its digest, unpacks the kernel image and modules, and renames the
// result into place, so a crash never leaves a half-filled cache entry.
func unpackKernel(ctx context.Context, pkg, sum, cacheDir, dir string) error {
	if err := os.MkdirAll(filepath.Join(cacheDir, "kernel"), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Join(cacheDir, "kernel"), ".fetch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// apt's download sandbox user cannot write a root-only directory; the
	// download then runs as root with a warning, which is expected here.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if _, err := run(ctx, tmp, "apt-get", "download", pkg); err != nil {
		return err
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, pkg+"_*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("apt-get download left %d .deb files in %s, want 1", len(debs), tmp)
	}
	got, err := fileSHA256(debs[0])
	if err != nil {
		return err
	}
	if got != sum {
		return fmt.Errorf("%s has sha256 %s, the apt index says %s (run apt-get update)", debs[0], got, sum)
	}
	root := filepath.Join(tmp, "root")
	if _, err := run(ctx, "", "dpkg-deb", "-x", debs[0], root); err != nil {
		return err
	}
	out := filepath.Join(tmp, "kernel")
	if err := os.Mkdir(out, 0o755); err != nil {
		return err
	}
	vmlinuz, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	mods, _ := filepath.Glob(filepath.Join(root, "lib", "modules", "*"))
	if len(vmlinuz) != 1 || len(mods) != 1 {
		return fmt.Errorf("package holds %d kernel images and %d module trees, want 1 each", len(vmlinuz), len(mods))
	}
	if err := os.Rename(vmlinuz[0], filepath.Join(out, "vmlinuz")); err != nil {
		return err
	}
	if err := os.Rename(mods[0], filepath.Join(out, "modules")); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "release"), []byte(filepath.Base(mods[0])+"\n"), 0o644); err != nil {
		return err
	}
	return renameIntoCache(out, dir)
}

// renameIntoCache moves a finished directory to its cache name; losing the
// race to a concurrent builder of the same content is a success.
func renameIntoCache(tmp, dir string) error {
	err := os.Rename(tmp, dir)
	if err != nil && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("move %s into the cache: %w", dir, err)
	}
	return nil
}

func loadKernel(pkg, sum, dir string) (*Kernel, error) {
	b, err := readFileLimit(filepath.Join(dir, "release"), 256)
	if err != nil {
		return nil, err
	}
	release := strings.TrimSpace(string(b))
	k := &Kernel{Package: pkg, Release: release, SHA256: sum,
		Vmlinuz: filepath.Join(dir, "vmlinuz"), ModulesDir: filepath.Join(dir, "modules")}
	if _, err := os.Stat(k.Vmlinuz); err != nil {
		return nil, err
	}
	return k, nil
}

func validPackageName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '+') {
			return false
		}
	}
	return true
}

// run runs a command and returns its standard output; the error carries the
// end of its standard error.
func run(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := stderr.Bytes()
		if len(msg) > 1024 {
			msg = msg[len(msg)-1024:]
		}
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(msg))
	}
	return stdout.String(), nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, bufio.NewReader(f)); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// readFileLimit reads a file of at most limit bytes.
func readFileLimit(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}
