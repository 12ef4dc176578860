// Command space-guest is the guest daemon of a SPACE sandbox. It serves the
// guest protocol (package guestd) on the sandbox's one channel to its host
// bridge and, as PID 1, reaps every orphan of the sandbox.
//
//	space-guest --channel fd:3          serve the inherited stream on fd 3 (ns runtime)
//	space-guest --channel virtio:NAME   serve the virtio-serial port named NAME (vm runtime)
//	space-guest --channel unix:PATH     listen on PATH, one connection at a time (tests)
//	space-guest --init --channel ...    boot the VM as its init, then exec the daemon (vm runtime's initramfs)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/guestd"
	"github.com/spacesandbox/space/internal/guestinit"
)

func main() {
	os.Exit(run())
}

func run() int {
	channel := flag.String("channel", "", "the channel to the host: fd:N, virtio:NAME or unix:PATH")
	debug := flag.Bool("debug", false, "log at debug level")
	version := flag.Bool("version", false, "print the version and exit")
	initVM := flag.Bool("init", false, "run as the VM's init first: modules, root disk, switch root (package guestinit)")
	flag.Parse()
	if *version {
		fmt.Println(guestd.Version)
		return 0
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	kind, arg, ok := strings.Cut(*channel, ":")
	if !ok || arg == "" {
		log.Error("--channel is required: fd:N, virtio:NAME or unix:PATH", "got", *channel)
		return 2
	}
	if *initVM {
		// Boot execs the daemon (this binary without --init) once the VM
		// is ready; it returns only on failure.
		err := guestinit.Boot(log, *channel)
		log.Error("space-guest init failed", "err", err)
		return 1
	}
	pid1 := os.Getpid() == 1
	if pid1 {
		if err := mountProc(); err != nil {
			log.Warn("mount /proc", "err", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM, unix.SIGINT)
	defer stop()
	// Threads for the worst case, made before the workload can exhaust the
	// sandbox's pids limit (see ReserveThreads).
	guestd.ReserveThreads(48)
	// A VM's init (its channel is virtio) prepares the workload cgroup at
	// start, before a template snapshot is taken of it.
	cfg := guestd.Config{ReapAll: pid1, PrepareWorkload: pid1 && kind == "virtio"}

	var err error
	switch kind {
	case "fd":
		err = serveFD(ctx, arg, cfg, log)
	case "virtio":
		err = serveVirtio(ctx, "/sys/class/virtio-ports", "/dev", arg, cfg, log)
	case "unix":
		err = serveUnix(ctx, arg, cfg, log)
	default:
		err = fmt.Errorf("channel kind %q: want fd, virtio or unix", kind)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("space-guest stopped", "err", err)
		return 1
	}
	return 0
}

// mountProc mounts /proc when the daemon is PID 1 and nothing mounted it.
func mountProc() error {
	if _, err := os.Stat("/proc/self"); err == nil {
		return nil
	}
	if err := os.MkdirAll("/proc", 0o555); err != nil {
		return err
	}
	return unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}
