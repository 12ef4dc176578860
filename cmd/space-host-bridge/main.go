// Command space-host-bridge is the host side of one execution's guest
// channel: the sandbox manager (`space node`) starts one per execution, in
// the execution's directory, with the channel as an inherited descriptor,
// and talks to it over a unix socket (internal/bridge). One runs per
// sandbox, so it links as little as it can (deps_test.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spacesandbox/space/internal/bridge"
	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/hostbin"
)

func main() {
	os.Exit(runHostBridge(os.Args[1:]))
}

// runHostBridge is space-host-bridge (or `space host-bridge`, which execs
// it).
func runHostBridge(args []string) int {
	fs := flag.NewFlagSet("host-bridge", flag.ContinueOnError)
	execID := fs.String("exec-id", "", "execution this bridge serves")
	socket := fs.String("socket", "", "unix socket to serve the sandbox manager on")
	exitFile := fs.String("exit-file", "", "file that receives the reason the bridge stopped")
	errorsFile := fs.String("errors-file", "", "file that receives the guest's protocol errors by kind (JSON) when the bridge stops after any")
	guestFD := fs.Int("guest-fd", 3, "inherited descriptor of the guest channel")
	guestPid := fs.Int("guest-pid", 0, "pid of the VMM the guest channel must be connected to (vm); 0: the channel is a socketpair from the node-manager (ns) and is not checked")
	guestStart := fs.Uint64("guest-start-time", 0, "start time (/proc/<pid>/stat field 22) of the process --guest-pid names")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if (*guestPid == 0) != (*guestStart == 0) || *guestPid < 0 {
		fmt.Fprintln(os.Stderr, "space-host-bridge: --guest-pid and --guest-start-time go together, and the pid is positive")
		return 2
	}
	// The node hands a bridge the failpoints it was armed with (tests
	// only); a name no point has stops the bridge before it serves.
	if err := failpoint.FromEnvironment(); err != nil {
		fmt.Fprintf(os.Stderr, "space-host-bridge: %v\n", err)
		return 2
	}
	log := hostbin.Logger().With("component", "host-bridge")
	conn, err := bridge.OpenChannel(*guestFD)
	if err != nil {
		fmt.Fprintf(os.Stderr, "space-host-bridge: %v\n", err)
		return 1
	}
	// The bridge runs in the execution's directory (the sandbox manager
	// starts it there): it stops when that directory is removed.
	cfg := bridge.Config{ExecID: *execID, Socket: *socket, Channel: conn, ExitFile: *exitFile, ErrorsFile: *errorsFile, Dir: "."}
	if *guestPid != 0 {
		cfg.Guest = &bridge.Process{Pid: *guestPid, StartTime: *guestStart}
	}
	// New refuses a channel whose peer is not the VMM, writing why to the
	// exit file; the bridge then exits without serving.
	b, err := bridge.New(cfg, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "space-host-bridge: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// The bridge outlives the manager that started it; a hang-up of the
	// session it left must not stop it.
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	if err := b.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "space-host-bridge: %v\n", err)
		return 1
	}
	return 0
}
