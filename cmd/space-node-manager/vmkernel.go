package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/vmimage"
)

// The --kernel-build modes (vmimage.KernelBuildBackground and the rest).
const (
	kernelBuildBackground = vmimage.KernelBuildBackground
	kernelBuildWait       = vmimage.KernelBuildWait
	kernelBuildOff        = vmimage.KernelBuildOff
)

// validKernelBuild checks a --kernel-build value.
func validKernelBuild(mode string) error { return vmimage.ValidKernelBuild(mode) }

// kernelBuildNice is the niceness of a background kernel build: sandboxes
// come first.
const kernelBuildNice = 10

// vmKernels chooses the vm runtime's kernel at start and moves it to the
// minimal kernel once built. Its functions are vmimage's, replaced in tests.
type vmKernels struct {
	cacheDir string
	mode     string
	log      *slog.Logger
	// status receives the vm runtime's status line (privop Hello, shown
	// in GET /v1/nodes).
	status func(string)
	cached func(ctx context.Context, cacheDir string) (*vmimage.Kernel, error)
	fetch  func(ctx context.Context, cacheDir string) (*vmimage.Kernel, error)
	build  func(ctx context.Context, cacheDir string, opts vmimage.KernelBuildOptions) (*vmimage.Kernel, error)
	await  func(ctx context.Context, cacheDir string) (*vmimage.Kernel, error)
	// logEvery is how often a build's progress is logged at most (steps
	// are always logged).
	logEvery time.Duration
}

func newVMKernels(cacheDir, mode string, status func(string), log *slog.Logger) *vmKernels {
	return &vmKernels{
		cacheDir: cacheDir, mode: mode, log: log, status: status,
		cached: vmimage.CachedMinimalKernel, fetch: vmimage.FetchKernel,
		build: vmimage.BuildMinimalKernelWith, await: vmimage.AwaitMinimalKernel,
		logEvery: 30 * time.Second,
	}
}

// first returns the kernel the vm runtime starts on: the minimal kernel
// when it is built, else Debian's cloud kernel; later says whether the
// minimal kernel may still come (call follow).
func (v *vmKernels) first(ctx context.Context) (k *vmimage.Kernel, later bool, err error) {
	k, err = v.cached(ctx, v.cacheDir)
	if err == nil {
		v.status(describeKernel(k))
		return k, false, nil
	}
	notBuilt := errors.Is(err, errdefs.ErrNotFound)
	if !notBuilt {
		v.log.Warn("cannot look for the minimal guest kernel", "cache", v.cacheDir, "reason", err)
	}
	if k, err = v.fetch(ctx, v.cacheDir); err != nil {
		return nil, false, err
	}
	later = notBuilt && v.mode != kernelBuildOff
	switch {
	case !later:
		v.log.Warn("the minimal guest kernel is not built: VMs boot Debian's cloud kernel on q35 (slower); build it with `make kernel`",
			"cache", v.cacheDir, "kernel_build", v.mode)
		v.status(describeKernel(k) + "; the minimal kernel is not built (make kernel)")
	case v.mode == kernelBuildWait:
		v.status(describeKernel(k) + "; waiting for a build of the minimal kernel")
	default:
		v.log.Info("the minimal guest kernel is not built yet: VMs boot Debian's cloud kernel on q35 meanwhile; building it in the background (minutes)",
			"cache", v.cacheDir)
		v.status(describeKernel(k) + "; building the minimal kernel")
	}
	return k, later, nil
}

// follow builds the minimal kernel (background) or waits for another
// process's build (wait) and hands it to use, which moves new VMs to it.
// It returns when that is done, has failed, or ctx ends; the runtime keeps
// its first kernel on failure, with the reason in its status.
func (v *vmKernels) follow(ctx context.Context, first *vmimage.Kernel, use func(*vmimage.Kernel) error) {
	var k *vmimage.Kernel
	var err error
	t0 := time.Now()
	if v.mode == kernelBuildWait {
		k, err = v.await(ctx, v.cacheDir)
	} else {
		k, err = v.build(ctx, v.cacheDir, vmimage.KernelBuildOptions{
			Log: v.log, Nice: kernelBuildNice, Progress: v.progress(first),
		})
	}
	if err == nil {
		err = use(k)
	}
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		v.log.Error("the minimal guest kernel is not available: VMs keep booting the cloud kernel on q35", "err", err)
		v.status(describeKernel(first) + "; the minimal kernel build failed (restart the node-manager to retry): " + err.Error())
		return
	}
	v.log.Info("new VMs boot the minimal kernel on microvm; running VMs keep theirs", "kernel", k.Release, "after", time.Since(t0).Round(time.Second))
	v.status(describeKernel(k))
}

// progress returns the build's progress callback: the status line follows
// every object, the log every logEvery and every step.
func (v *vmKernels) progress(first *vmimage.Kernel) func(vmimage.KernelBuildProgress) {
	logged := vmimage.LogKernelProgress(v.log, v.logEvery)
	return func(p vmimage.KernelBuildProgress) {
		v.status(describeKernel(first) + "; building the minimal kernel: " + p.String())
		logged(p)
	}
}

// describeKernel names the machine and kernel VMs boot.
func describeKernel(k *vmimage.Kernel) string {
	if k.Minimal {
		return "microvm (minimal kernel " + k.Release + ")"
	}
	return "q35 (Debian's cloud kernel " + k.Release + ")"
}
