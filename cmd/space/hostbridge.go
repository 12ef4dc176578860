package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spacesandbox/space/internal/bridge"
)

// runHostBridge is `space host-bridge`: started by the sandbox manager, one per
// execution, with the guest channel as an inherited descriptor.
func runHostBridge(args []string) int {
	fs := flag.NewFlagSet("host-bridge", flag.ContinueOnError)
	execID := fs.String("exec-id", "", "execution this bridge serves")
	socket := fs.String("socket", "", "unix socket to serve the sandbox manager on")
	exitFile := fs.String("exit-file", "", "file that receives the reason the bridge stopped")
	guestFD := fs.Int("guest-fd", 3, "inherited descriptor of the guest channel")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := newLogger().With("component", "host-bridge")
	f := os.NewFile(uintptr(*guestFD), "guest-channel")
	if f == nil {
		fmt.Fprintf(os.Stderr, "space host-bridge: descriptor %d is not open\n", *guestFD)
		return 1
	}
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "space host-bridge: guest channel on fd %d: %v\n", *guestFD, err)
		return 1
	}
	b, err := bridge.New(bridge.Config{ExecID: *execID, Socket: *socket, Channel: conn, ExitFile: *exitFile}, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "space host-bridge: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// The bridge outlives the manager that started it; a hang-up of the
	// session it left must not stop it.
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	if err := b.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "space host-bridge: %v\n", err)
		return 1
	}
	return 0
}
