package vmimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/pinnedproc"
)

// The minimal guest kernel: Debian's kernel sources configured with
// GuestKernelConfig (everything the guest needs built in, virtio over MMIO,
// nothing else) and compiled on the host, once per source package version
// and fragment. It boots on QEMU's microvm machine, which has no PCI and no
// firmware tables to walk, in a fraction of the stock cloud kernel's time.
const (
	// KernelSourcePackage is Debian's package of the kernel sources.
	KernelSourcePackage = "linux-source-6.1"
	// kernelBuilderVersion names the build steps; bump it when they change
	// so cached kernels are rebuilt.
	kernelBuilderVersion = "space-minimal-kernel-v1"
	// minimalKernelDir is the cache directory of built kernels, below the
	// cache dir, one subdirectory per key.
	minimalKernelDir = "minimal-kernel"
)

// Files of a built kernel's cache directory.
const (
	mkImage   = "bzImage"
	mkRelease = "release"
	mkConfig  = "config"
)

// MinimalKernelKey is the cache key of the kernel built from the source
// package with the given .deb digest and configuration fragment.
func MinimalKernelKey(sourceSHA256 string, fragment []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%d\n", kernelBuilderVersion, KernelSourcePackage, sourceSHA256, len(fragment))
	h.Write(fragment)
	return hex.EncodeToString(h.Sum(nil))
}

// CachedMinimalKernel returns the minimal guest kernel of the current source
// package and GuestKernelConfig if cacheDir holds it, and an ErrNotFound
// error (no build is started) otherwise.
func CachedMinimalKernel(ctx context.Context, cacheDir string) (*Kernel, error) {
	_, sum, err := packageInfo(ctx, KernelSourcePackage)
	if err != nil {
		return nil, err
	}
	key := MinimalKernelKey(sum, GuestKernelConfig)
	k, err := loadMinimalKernel(key, filepath.Join(cacheDir, minimalKernelDir, key))
	if err != nil {
		return nil, fmt.Errorf("%w: minimal guest kernel %s is not built in %s (vmimage.BuildMinimalKernel): %v", errdefs.ErrNotFound, key[:16], cacheDir, err)
	}
	return k, nil
}

// BuildMinimalKernel returns the minimal guest kernel, building it into
// cacheDir/minimal-kernel/<key> unless it is there already. A build takes
// minutes and about 3 GB of scratch space next to the cache; concurrent
// callers, in this or other processes, wait for one build. It uses the
// system package manager (apt-cache, apt-get download, dpkg-deb), tar with
// xz, and the kernel's build tools (make, gcc, bc, flex, bison, libelf).
func BuildMinimalKernel(ctx context.Context, cacheDir string, log *slog.Logger) (*Kernel, error) {
	return BuildMinimalKernelWith(ctx, cacheDir, KernelBuildOptions{Log: log})
}

// KernelBuildOptions are the optional parts of a minimal kernel build.
type KernelBuildOptions struct {
	// Log receives the build's start and end; default slog.Default().
	Log *slog.Logger
	// Progress, when set, is called as the build goes: at each step and
	// for every object the compiler finishes (callers throttle).
	Progress func(KernelBuildProgress)
	// Locked, when set, is called once the build holds the cache's build
	// lock, or found the kernel built: from then on AwaitMinimalKernel in
	// any process waits for this build.
	Locked func()
	// Nice is added to the compiler's scheduling niceness (0 to 19), so
	// that a build in the background leaves the CPUs to sandboxes.
	Nice int
}

// KernelBuildProgress is how far a minimal kernel build is.
type KernelBuildProgress struct {
	// Step is the build step: "fetch the source package", "configure",
	// "compile", "collect the image".
	Step string
	// Objects is the number of files compiled so far in step "compile";
	// Expected is about how many there are (the last build's count, or
	// a figure measured for the current config), 0 when unknown.
	Objects, Expected int
}

// Percent is the share of the compile done, 0 to 99 (100 only when the
// build is done), or -1 when unknown.
func (p KernelBuildProgress) Percent() int {
	switch {
	case p.Step != "compile":
		return -1
	case p.Expected <= 0:
		return -1
	}
	return min(99, p.Objects*100/p.Expected)
}

// String is the progress as one line, e.g. "compile: 1234 of about 2100
// objects (58%)".
func (p KernelBuildProgress) String() string {
	if p.Step != "compile" {
		return p.Step
	}
	if pc := p.Percent(); pc >= 0 {
		return fmt.Sprintf("compile: %d of about %d objects (%d%%)", p.Objects, p.Expected, pc)
	}
	return fmt.Sprintf("compile: %d objects", p.Objects)
}

// BuildMinimalKernelWith is BuildMinimalKernel with options.
func BuildMinimalKernelWith(ctx context.Context, cacheDir string, opts KernelBuildOptions) (*Kernel, error) {
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("%w: minimal guest kernel: built for x86_64 hosts only, this is %s", errdefs.ErrFailedPrecondition, runtime.GOARCH)
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	if opts.Nice < 0 || opts.Nice > 19 {
		return nil, fmt.Errorf("%w: minimal guest kernel: niceness %d, want 0 to 19", errdefs.ErrInvalidArgument, opts.Nice)
	}
	locked := func() {
		if opts.Locked != nil {
			opts.Locked()
		}
	}
	version, sum, err := packageInfo(ctx, KernelSourcePackage)
	if err != nil {
		return nil, err
	}
	key := MinimalKernelKey(sum, GuestKernelConfig)
	parent := filepath.Join(cacheDir, minimalKernelDir)
	dir := filepath.Join(parent, key)
	if k, err := loadMinimalKernel(key, dir); err == nil {
		locked()
		return k, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("minimal guest kernel: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(parent, buildLock))
	if err != nil {
		return nil, fmt.Errorf("minimal guest kernel: %w", err)
	}
	defer unlock()
	locked()
	// Another builder may have finished while this one waited.
	if k, err := loadMinimalKernel(key, dir); err == nil {
		return k, nil
	}
	t0 := time.Now()
	log.Info("building the minimal guest kernel (minutes, once per source version and config)",
		"package", KernelSourcePackage, "version", version, "key", key[:16], "jobs", runtime.NumCPU(), "nice", opts.Nice)
	b := &kernelBuild{pkg: KernelSourcePackage, sum: sum, parent: parent, nice: opts.Nice, progress: opts.Progress,
		expected: expectedObjects(parent)}
	if err := b.run(ctx); err != nil {
		return nil, fmt.Errorf("minimal guest kernel from %s %s: %w", KernelSourcePackage, version, err)
	}
	if err := renameIntoCache(b.out, dir); err != nil {
		return nil, fmt.Errorf("minimal guest kernel: %w", err)
	}
	k, err := loadMinimalKernel(key, dir)
	if err != nil {
		return nil, fmt.Errorf("minimal guest kernel: %w", err)
	}
	rememberObjects(parent, b.objects)
	log.Info("minimal guest kernel built", "release", k.Release, "image", k.Vmlinuz, "objects", b.objects, "took", time.Since(t0).Round(time.Second))
	return k, nil
}

// AwaitMinimalKernel returns the minimal guest kernel when cacheDir holds
// it, or, while a build of it holds the cache's lock (BuildMinimalKernel in
// any process), waits for that build and returns its kernel. With neither it
// returns an ErrNotFound error at once: it never starts a build.
func AwaitMinimalKernel(ctx context.Context, cacheDir string) (*Kernel, error) {
	k, err := CachedMinimalKernel(ctx, cacheDir)
	if !errors.Is(err, errdefs.ErrNotFound) {
		return k, err
	}
	lock := filepath.Join(cacheDir, minimalKernelDir, buildLock)
	f, oerr := os.Open(lock)
	if oerr != nil {
		return nil, err // no build has ever run here
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) == nil {
		return nil, err // nobody builds
	}
	unlock, lerr := lockShared(ctx, f, lock)
	if lerr != nil {
		return nil, fmt.Errorf("minimal guest kernel: %w", lerr)
	}
	unlock()
	return CachedMinimalKernel(ctx, cacheDir)
}

// buildLock is the file below cacheDir/minimal-kernel a build holds locked.
const buildLock = ".lock"

// kernelBuild is one build in a scratch directory below parent.
type kernelBuild struct {
	pkg, sum, parent string
	nice             int
	progress         func(KernelBuildProgress)
	expected         int    // about how many objects the compile makes
	objects          int    // how many it made
	work             string // scratch directory, removed at the end
	src              string // the unpacked source tree
	out              string // the finished cache entry, still in work
}

// run is the build as a list of steps; the scratch directory goes at the
// end, leaving b.out to be renamed by the caller first.
func (b *kernelBuild) run(ctx context.Context) (err error) {
	if b.work, err = os.MkdirTemp(b.parent, ".build-"); err != nil {
		return err
	}
	// apt's download sandbox user must be able to enter the directory.
	if err := os.Chmod(b.work, 0o755); err != nil {
		return err
	}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"fetch the source package", b.fetch},
		{"configure", b.configure},
		{"compile", b.compile},
		{"collect the image", b.collect},
	}
	for _, s := range steps {
		b.report(KernelBuildProgress{Step: s.name})
		if err := s.fn(ctx); err != nil {
			os.RemoveAll(b.work)
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

// fetch downloads the source package, checks its digest against the apt
// index and unpacks the source tree.
func (b *kernelBuild) fetch(ctx context.Context) error {
	if _, err := run(ctx, b.work, "apt-get", "download", b.pkg); err != nil {
		return err
	}
	debs, _ := filepath.Glob(filepath.Join(b.work, b.pkg+"_*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("apt-get download left %d .deb files in %s, want 1", len(debs), b.work)
	}
	got, err := fileSHA256(debs[0])
	if err != nil {
		return err
	}
	if got != b.sum {
		return fmt.Errorf("%s has sha256 %s, the apt index says %s (run apt-get update)", debs[0], got, b.sum)
	}
	pkgRoot := filepath.Join(b.work, "pkg")
	if _, err := run(ctx, "", "dpkg-deb", "-x", debs[0], pkgRoot); err != nil {
		return err
	}
	os.Remove(debs[0])
	tarballs, _ := filepath.Glob(filepath.Join(pkgRoot, "usr", "src", "linux-source-*.tar.xz"))
	if len(tarballs) != 1 {
		return fmt.Errorf("%s holds %d source tarballs, want 1", b.pkg, len(tarballs))
	}
	if _, err := run(ctx, b.work, "tar", "-xJf", tarballs[0], "--no-same-owner", "--no-same-permissions"); err != nil {
		return err
	}
	os.RemoveAll(pkgRoot)
	b.src = filepath.Join(b.work, strings.TrimSuffix(filepath.Base(tarballs[0]), ".tar.xz"))
	if fi, err := os.Lstat(filepath.Join(b.src, "Makefile")); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("the source tarball did not unpack into %s: %v", b.src, err)
	}
	return nil
}

// configure writes .config from the fragment (everything else off) and
// checks that every option of the fragment took: Kconfig silently drops an
// option whose dependencies are off.
func (b *kernelBuild) configure(ctx context.Context) error {
	want, err := ParseKernelConfig(GuestKernelConfig)
	if err != nil {
		return err
	}
	fragment := filepath.Join(b.work, "space.config")
	if err := os.WriteFile(fragment, GuestKernelConfig, 0o644); err != nil {
		return err
	}
	if err := b.make(ctx, "KCONFIG_ALLCONFIG="+fragment, "allnoconfig"); err != nil {
		return err
	}
	got, err := readKernelConfig(filepath.Join(b.src, ".config"))
	if err != nil {
		return err
	}
	if missing := want.Missing(got); len(missing) > 0 {
		return fmt.Errorf("the kernel config lacks options of the fragment (a dependency is off; add it to guestkernel.config): %s", strings.Join(missing, ", "))
	}
	return nil
}

func (b *kernelBuild) compile(ctx context.Context) error {
	return b.make(ctx, "-j"+strconv.Itoa(runtime.NumCPU()), "bzImage")
}

func (b *kernelBuild) report(p KernelBuildProgress) {
	if p.Step == "compile" {
		p.Expected = b.expected
	}
	if b.progress != nil {
		b.progress(p)
	}
}

// objectDone counts one object the compiler finished.
func (b *kernelBuild) objectDone() {
	b.objects++
	b.report(KernelBuildProgress{Step: "compile", Objects: b.objects})
}

// collect puts the image, the release and the config into b.out.
func (b *kernelBuild) collect(ctx context.Context) error {
	release, err := b.makeOutput(ctx, "-s", "kernelrelease")
	if err != nil {
		return err
	}
	release = strings.TrimSpace(release)
	if release == "" || len(release) > 64 || strings.ContainsAny(release, "/\n\x00 ") {
		return fmt.Errorf("make kernelrelease printed %q", truncate(release, 80))
	}
	b.out = filepath.Join(b.work, "kernel")
	if err := os.Mkdir(b.out, 0o755); err != nil {
		return err
	}
	for _, f := range []struct{ from, to string }{
		{filepath.Join(b.src, "arch", "x86", "boot", "bzImage"), mkImage},
		{filepath.Join(b.src, ".config"), mkConfig},
	} {
		if err := os.Rename(f.from, filepath.Join(b.out, f.to)); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(b.out, mkRelease), []byte(release+"\n"), 0o644); err != nil {
		return err
	}
	// The source tree and objects (gigabytes) go before the caller renames
	// b.out out of the scratch directory.
	return os.RemoveAll(b.src)
}

// make runs make in the source tree for x86_64 with a fixed build identity;
// its output goes to a log whose end an error carries.
func (b *kernelBuild) make(ctx context.Context, args ...string) error {
	logPath := filepath.Join(b.work, "build.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := b.makeCmd(ctx, args...)
	// Kbuild prints one line per file it compiles ("  CC      kernel/fork.o"):
	// counted, they are the compile's progress.
	out := &buildOutput{w: logf, object: b.objectDone}
	cmd.Stdout, cmd.Stderr = out, logf
	if err := pinnedproc.Run(cmd); err != nil {
		return fmt.Errorf("make %s: %w: %s", strings.Join(args, " "), err, tailFile(logPath, 2048))
	}
	return nil
}

func (b *kernelBuild) makeOutput(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := b.makeCmd(ctx, args...)
	cmd.Stdout = &out
	if err := pinnedproc.Run(cmd); err != nil {
		return "", fmt.Errorf("make %s: %w", strings.Join(args, " "), err)
	}
	return out.String(), nil
}

func (b *kernelBuild) makeCmd(ctx context.Context, args ...string) *exec.Cmd {
	argv := append([]string{"make", "ARCH=x86_64"}, args...)
	if b.nice > 0 {
		argv = append([]string{"nice", "-n", strconv.Itoa(b.nice)}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = b.src
	cmd.Env = append(os.Environ(), "KBUILD_BUILD_USER=space", "KBUILD_BUILD_HOST=space",
		"KBUILD_BUILD_TIMESTAMP=1970-01-01", "LC_ALL=C")
	// make and its compilers form a process group that ends with ctx or
	// with this process: a build must not outlive its owner (run it with
	// pinnedproc, whose thread lives as long as the build: the
	// node-manager, which builds in the background, ends threads).
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true, Pdeathsig: unix.SIGKILL}
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// loadMinimalKernel returns the built kernel in dir.
func loadMinimalKernel(key, dir string) (*Kernel, error) {
	b, err := readFileLimit(filepath.Join(dir, mkRelease), 256)
	if err != nil {
		return nil, err
	}
	k := &Kernel{Package: KernelSourcePackage, Release: strings.TrimSpace(string(b)), SHA256: key,
		Vmlinuz: filepath.Join(dir, mkImage), Minimal: true}
	fi, err := os.Stat(k.Vmlinuz)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() == 0 {
		return nil, fmt.Errorf("%s is not a kernel image", k.Vmlinuz)
	}
	return k, nil
}

// MinimalKernelConfig returns the .config a built minimal kernel was
// compiled with.
func MinimalKernelConfig(k *Kernel) (KernelConfig, error) {
	if !k.Minimal {
		return nil, fmt.Errorf("%w: kernel %s is not a built minimal kernel", errdefs.ErrInvalidArgument, k.Vmlinuz)
	}
	return readKernelConfig(filepath.Join(filepath.Dir(k.Vmlinuz), mkConfig))
}

func readKernelConfig(path string) (KernelConfig, error) {
	b, err := readFileLimit(path, maxKernelConfigBytes)
	if err != nil {
		return nil, err
	}
	return ParseKernelConfig(b)
}

// packageInfo reads the candidate version and SHA256 of pkg from the apt
// index.
func packageInfo(ctx context.Context, pkg string) (version, sum string, err error) {
	out, err := run(ctx, "", "apt-cache", "show", "--no-all-versions", pkg)
	if err != nil {
		return "", "", fmt.Errorf("%w: package %s: %v (run apt-get update)", errdefs.ErrFailedPrecondition, pkg, err)
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Version: "); ok && version == "" {
			version = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "SHA256: "); ok && sum == "" {
			v = strings.TrimSpace(v)
			if _, err := hex.DecodeString(v); err == nil && len(v) == 64 {
				sum = v
			}
		}
	}
	if version == "" || sum == "" || !validVersion(version) {
		return "", "", fmt.Errorf("%w: package %s: apt-cache show gives no version and SHA256 (run apt-get update)", errdefs.ErrFailedPrecondition, pkg)
	}
	return version, sum, nil
}

func validVersion(v string) bool {
	if len(v) > 128 {
		return false
	}
	for _, c := range []byte(v) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(".+-~:", c) >= 0) {
			return false
		}
	}
	return true
}

// lockFile takes an exclusive flock on path, waiting for another holder
// until ctx ends; the returned function releases it.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := flockWait(ctx, f, unix.LOCK_EX, path); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// lockShared takes a shared flock on f (the file at path), waiting for an
// exclusive holder until ctx ends; the returned function releases it.
func lockShared(ctx context.Context, f *os.File, path string) (func(), error) {
	if err := flockWait(ctx, f, unix.LOCK_SH, path); err != nil {
		return nil, err
	}
	return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN) }, nil
}

// flockWait takes flock how on f, polling until ctx ends.
func flockWait(ctx context.Context, f *os.File, how int, path string) error {
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for another build holding %s: %w", path, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// tailFile returns the last n bytes of a file, or "".
func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	buf := make([]byte, fi.Size()-off)
	k, _ := f.ReadAt(buf, off)
	return strings.TrimSpace(string(buf[:k]))
}
