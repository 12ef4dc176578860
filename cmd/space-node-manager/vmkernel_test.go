package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/vmimage"
)

var (
	testCloud   = &vmimage.Kernel{Vmlinuz: "/c/vmlinuz", Release: "6.1.0-28-cloud-amd64"}
	testMinimal = &vmimage.Kernel{Vmlinuz: "/c/bzImage", Release: "6.1.119-space", Minimal: true}
)

// fakeKernels is a vmKernels whose vmimage functions are recorded fakes.
type fakeKernels struct {
	*vmKernels
	statuses []string
	built    []vmimage.KernelBuildOptions
	awaited  int
	used     []*vmimage.Kernel
}

func newFakeKernels(mode string, cachedErr, buildErr error) *fakeKernels {
	f := &fakeKernels{}
	f.vmKernels = &vmKernels{
		cacheDir: "/cache", mode: mode, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		status: func(s string) { f.statuses = append(f.statuses, s) },
		cached: func(context.Context, string) (*vmimage.Kernel, error) {
			if cachedErr != nil {
				return nil, cachedErr
			}
			return testMinimal, nil
		},
		fetch: func(context.Context, string) (*vmimage.Kernel, error) { return testCloud, nil },
		build: func(_ context.Context, _ string, opts vmimage.KernelBuildOptions) (*vmimage.Kernel, error) {
			f.built = append(f.built, opts)
			for _, p := range []vmimage.KernelBuildProgress{{Step: "configure"}, {Step: "compile", Objects: 500, Expected: 995}} {
				opts.Progress(p)
			}
			if buildErr != nil {
				return nil, buildErr
			}
			return testMinimal, nil
		},
		await: func(context.Context, string) (*vmimage.Kernel, error) {
			f.awaited++
			return testMinimal, nil
		},
	}
	return f
}

func (f *fakeKernels) use(k *vmimage.Kernel) error {
	f.used = append(f.used, k)
	return nil
}

func (f *fakeKernels) lastStatus() string { return f.statuses[len(f.statuses)-1] }

var notBuilt = fmt.Errorf("%w: minimal guest kernel is not built", errdefs.ErrNotFound)

// TestVMKernelsBuildInBackground: without a minimal kernel the runtime
// starts on the cloud kernel at once, builds the minimal one at low
// priority with its progress in the status line, and moves to it.
func TestVMKernelsBuildInBackground(t *testing.T) {
	f := newFakeKernels(kernelBuildBackground, notBuilt, nil)
	k, later, err := f.first(context.Background())
	if err != nil || k != testCloud || !later {
		t.Fatalf("first = %v, %v, %v; want the cloud kernel and a build to follow", k, later, err)
	}
	if !strings.HasPrefix(f.lastStatus(), "q35 (Debian's cloud kernel 6.1.0-28-cloud-amd64); building") {
		t.Errorf("status at start %q", f.lastStatus())
	}
	f.follow(context.Background(), k, f.use)
	if len(f.built) != 1 || f.built[0].Nice != kernelBuildNice || f.awaited != 0 {
		t.Fatalf("builds %+v, awaits %d; want one build at niceness %d", f.built, f.awaited, kernelBuildNice)
	}
	if !slices.Contains(f.statuses, "q35 (Debian's cloud kernel 6.1.0-28-cloud-amd64); building the minimal kernel: compile: 500 of about 995 objects (50%)") {
		t.Errorf("statuses %q lack the compile's progress", f.statuses)
	}
	if len(f.used) != 1 || f.used[0] != testMinimal || f.lastStatus() != "microvm (minimal kernel 6.1.119-space)" {
		t.Errorf("used %v, status %q; want the minimal kernel on microvm", f.used, f.lastStatus())
	}
}

// TestVMKernelsBuildFails: a failed build leaves the runtime on the cloud
// kernel with the reason in its status.
func TestVMKernelsBuildFails(t *testing.T) {
	f := newFakeKernels(kernelBuildBackground, notBuilt, errors.New("apt-get download: no network"))
	k, _, _ := f.first(context.Background())
	f.follow(context.Background(), k, f.use)
	if len(f.used) != 0 || !strings.Contains(f.lastStatus(), "build failed") || !strings.Contains(f.lastStatus(), "no network") {
		t.Errorf("used %v, status %q; want no switch and the reason", f.used, f.lastStatus())
	}
}

// TestVMKernelsModes: a built kernel is used at once; off never builds;
// wait follows another process's build; a cache that cannot be looked in
// (no apt lists) starts on the cloud kernel and builds nothing.
func TestVMKernelsModes(t *testing.T) {
	f := newFakeKernels(kernelBuildBackground, nil, nil)
	if k, later, err := f.first(context.Background()); k != testMinimal || later || err != nil {
		t.Errorf("built: first = %v, %v, %v; want the minimal kernel and nothing to follow", k, later, err)
	}
	f = newFakeKernels(kernelBuildOff, notBuilt, nil)
	if k, later, _ := f.first(context.Background()); k != testCloud || later || !strings.Contains(f.lastStatus(), "not built") {
		t.Errorf("off: first = %v, %v, status %q; want the cloud kernel, nothing to follow", k, later, f.lastStatus())
	}
	f = newFakeKernels(kernelBuildWait, notBuilt, nil)
	k, later, _ := f.first(context.Background())
	if !later {
		t.Fatal("wait: nothing to follow")
	}
	f.follow(context.Background(), k, f.use)
	if f.awaited != 1 || len(f.built) != 0 || len(f.used) != 1 {
		t.Errorf("wait: awaited %d, built %d, used %v; want one wait and no build", f.awaited, len(f.built), f.used)
	}
	f = newFakeKernels(kernelBuildBackground, fmt.Errorf("%w: apt-cache: no lists", errdefs.ErrFailedPrecondition), nil)
	if k, later, err := f.first(context.Background()); k != testCloud || later || err != nil {
		t.Errorf("no apt lists: first = %v, %v, %v; want the cloud kernel and no build", k, later, err)
	}
	if err := validKernelBuild("sometimes"); err == nil {
		t.Error("--kernel-build sometimes accepted")
	}
}
