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
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/failpoint"
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
	workloadTasks := flag.String("workload-tasks", "", "fds of the workload cgroup's tasks files, comma-separated (ns runtime on cgroup v1)")
	daemonTasks := flag.String("daemon-tasks", "", "fds of the daemon cgroup's tasks files, in the order of --workload-tasks")
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
	// The node-manager hands the guest the failpoints it was armed with
	// (tests only); a name no point has stops the guest before it serves.
	// The sandbox's processes do not inherit it: each gets only the
	// environment its request and Init give (guestd's processEnv).
	if err := failpoint.FromEnvironment(); err != nil {
		log.Error("space-guest", "err", err)
		return 2
	}
	pid1 := os.Getpid() == 1
	if pid1 {
		if err := mountProc(); err != nil {
			log.Warn("mount /proc", "err", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM, unix.SIGINT)
	defer stop()
	// A VM's init (its channel is virtio) prepares the workload cgroup at
	// start, before a template snapshot is taken of it.
	cfg := guestd.Config{ReapAll: pid1, PrepareWorkload: pid1 && kind == "virtio"}
	into, err := taskFiles(*workloadTasks)
	if err != nil {
		log.Error("--workload-tasks", "err", err)
		return 2
	}
	back, err := taskFiles(*daemonTasks)
	if err != nil || len(back) != len(into) {
		log.Error("--daemon-tasks: want as many fds as --workload-tasks", "err", err, "workload", len(into), "daemon", len(back))
		return 2
	}
	cfg.WorkloadTasks, cfg.DaemonTasks = into, back
	if len(into) == 0 {
		// Threads for the worst case, made before the workload can exhaust
		// a pids limit it shares with the daemon (see ReserveThreads). With
		// tasks files the workload has a group of its own and the daemon
		// the rest of the sandbox's tasks.
		guestd.ReserveThreads(48)
	}

	failpoint.GuestAfterStart.Hit()
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

// taskFiles opens the comma-separated fds of a --workload-tasks or
// --daemon-tasks flag, and makes them close-on-exec: no process the daemon
// starts inherits them.
func taskFiles(list string) ([]*os.File, error) {
	if list == "" {
		return nil, nil
	}
	var files []*os.File
	for _, s := range strings.Split(list, ",") {
		fd, err := strconv.Atoi(s)
		if err != nil || fd <= 2 {
			return nil, fmt.Errorf("fd %q: want a number above 2", s)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			return nil, fmt.Errorf("fd %d: %w", fd, err)
		}
		files = append(files, os.NewFile(uintptr(fd), "tasks-"+s))
	}
	return files, nil
}
