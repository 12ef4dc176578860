// Command buildkernel builds the vm runtime's minimal guest kernel into the
// cache (vmimage.BuildMinimalKernel) and prints the image's path; a kernel
// already in the cache is reused. The build takes minutes (about 10 on an
// idle 2-core host), so `make run` (and a host that runs the tests) builds it
// ahead of time:
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

	"github.com/spacesandbox/space/internal/vmimage"
)

func main() {
	def := os.Getenv("SPACE_CACHE_DIR")
	if def == "" {
		def = "/var/cache/space"
	}
	cacheDir := flag.String("cache-dir", def, "the cache the vm runtime reads kernels from")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	k, err := vmimage.BuildMinimalKernel(ctx, *cacheDir, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "buildkernel: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(k.Vmlinuz)
}
