// Command buildkernel builds the vm runtime's minimal guest kernel into the
// cache (vmimage.BuildMinimalKernel) and prints the image's path; a kernel
// already in the cache is reused. The build takes minutes (about 10 on an
// idle 2-core host). A node does not need it to start (it boots Debian's
// cloud kernel on q35 meanwhile and builds this one in the background, see
// `space node-manager --kernel-build`); `make kernel` builds it ahead of
// time, and `make test` runs it beside the tests:
//
//	go run ./internal/vmimage/buildkernel                     # $SPACE_CACHE_DIR or /var/cache/space
//	go run ./internal/vmimage/buildkernel -cache-dir /tmp/space-vm-test-cache   # the tests' cache
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/spacesandbox/space/internal/progress"
	"github.com/spacesandbox/space/internal/vmimage"
)

func main() {
	def := os.Getenv("SPACE_CACHE_DIR")
	if def == "" {
		def = "/var/cache/space"
	}
	cacheDir := flag.String("cache-dir", def, "the cache the vm runtime reads kernels from")
	nice := flag.Int("nice", 0, "niceness of the compiler (0 to 19): a build beside other work leaves them the CPUs")
	lockedFile := flag.String("locked-file", "", "create this file once the build holds the cache's lock (or found the kernel built): from then on, tests and nodes waiting for the kernel wait for this build")
	every := flag.Duration("progress-every", 30*time.Second, "how often to log the compile's progress")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// On a terminal the compile is a bar redrawn in place; elsewhere (make
	// test's log, CI) a line per step and every -progress-every.
	tty := term.IsTerminal(int(os.Stderr.Fd()))
	bar := progress.NewRenderer(os.Stderr)
	defer bar.Done()
	logged := vmimage.LogKernelProgress(log, *every)
	k, err := vmimage.BuildMinimalKernelWith(ctx, *cacheDir, vmimage.KernelBuildOptions{
		Log: log, Nice: *nice,
		Locked: func() {
			if *lockedFile != "" {
				if err := os.WriteFile(*lockedFile, nil, 0o644); err != nil {
					log.Warn("write the locked file", "err", err)
				}
			}
		},
		Progress: func(p vmimage.KernelBuildProgress) {
			if tty {
				bar.Show(progress.Report{Phase: "minimal kernel: " + p.Step, Done: int64(p.Objects), Total: int64(p.Expected), Unit: progress.UnitSteps})
				return
			}
			logged(p)
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "buildkernel: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(k.Vmlinuz)
}
