package bridge

// Endpoint verification of the guest channel.
//
// The bridge receives the guest channel as an inherited descriptor and serves
// it once: it never reconnects, so the channel is checked once, at start,
// before a single byte goes to the guest (New).
//
// vm: the channel is a unix socket the vm driver connected to QEMU's
// virtio-serial chardev socket. SO_PEERCRED on a connected unix stream socket
// names the process that called listen() on the other side: QEMU itself when
// it binds its own sockets, or the jail helper that binds them and then execs
// QEMU in place (same pid, same start time). The bridge is told that process
// (--guest-pid, --guest-start-time, the runtime record's SandboxPid and
// SandboxStartTime) and refuses to serve unless the peer is it: a QEMU that
// died and whose pid was reused, or another process that bound the same
// socket path, fails the pid or the start-time comparison.
//
// ns: the channel is one end of a socketpair the root node-manager made
// (socketpair(2), passed to the sandbox's init and to the node by SCM_RIGHTS).
// SO_PEERCRED on a socketpair names the process that created the pair, the
// node-manager, not the sandbox, so it says nothing about the sandbox and is
// not checked (Config.Guest is nil). Nor does it need to be: a socketpair has
// no name in any filesystem or abstract namespace, so no other process can
// bind or connect to it; the only ways to hold an end are to create the pair or
// to be handed a descriptor by a holder.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Process names one process by pid and start time (field 22 of
// /proc/<pid>/stat, clock ticks since boot): a pid alone may have been reused.
type Process struct {
	Pid       int
	StartTime uint64
}

func (p Process) String() string { return fmt.Sprintf("pid %d (start time %d)", p.Pid, p.StartTime) }

// PeerCred returns what SO_PEERCRED says of the other end of a unix socket
// connection: for a connection made with connect(2), the process that called
// listen(2) on the other side, as it was at that moment; for a socketpair, the
// process that made the pair.
func PeerCred(conn syscall.Conn) (unix.Ucred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return unix.Ucred{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return unix.Ucred{}, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return unix.Ucred{}, fmt.Errorf("peer credentials: %w", credErr)
	}
	return *cred, nil
}

// VerifyChannel checks that the guest channel conn is connected to the
// process want (the VMM): the peer's pid must be want's, and the process that
// now has that pid must have want's start time. The error, of class
// ErrPermissionDenied, names both processes.
func VerifyChannel(conn net.Conn, want Process) error {
	if want.Pid <= 0 {
		return fmt.Errorf("%w: guest channel: expected VMM pid %d is not a process", errdefs.ErrInvalidArgument, want.Pid)
	}
	sc, ok := conn.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("%w: guest channel is a %T, not a unix socket: its peer cannot be verified", errdefs.ErrFailedPrecondition, conn)
	}
	cred, err := PeerCred(sc)
	if err != nil {
		return fmt.Errorf("%w: guest channel: %v", errdefs.ErrPermissionDenied, err)
	}
	got := Process{Pid: int(cred.Pid)}
	if got.Pid > 0 {
		got.StartTime, _ = driver.ProcStartTime(got.Pid)
	}
	if got.Pid != want.Pid {
		return fmt.Errorf("%w: guest channel peer is %s, uid %d, not the VMM %s", errdefs.ErrPermissionDenied, got, cred.Uid, want)
	}
	start, err := driver.ProcStartTime(want.Pid)
	if errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("%w: guest channel peer pid %d has exited; the VMM %s is gone", errdefs.ErrPermissionDenied, want.Pid, want)
	}
	if err != nil {
		return fmt.Errorf("%w: guest channel peer: %v", errdefs.ErrPermissionDenied, err)
	}
	if start != want.StartTime {
		return fmt.Errorf("%w: guest channel peer pid %d started at %d, not the VMM %s: the pid was reused",
			errdefs.ErrPermissionDenied, want.Pid, start, want)
	}
	return nil
}

// OpenChannel returns the guest channel inherited as descriptor fd. The
// descriptor is consumed: the returned connection holds a duplicate and fd is
// closed.
func OpenChannel(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "guest-channel")
	if f == nil {
		return nil, fmt.Errorf("%w: guest channel: descriptor %d is not open", errdefs.ErrInvalidArgument, fd)
	}
	defer f.Close()
	conn, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("guest channel on fd %d: %w", fd, err)
	}
	return conn, nil
}

// refuseChannel records why the bridge will not serve its channel where the
// manager looks for it after the bridge has gone.
func refuseChannel(cfg Config, err error) string {
	reason := "guest channel refused: " + err.Error()
	if cfg.ExitFile != "" {
		_ = os.WriteFile(cfg.ExitFile, []byte(reason+"\n"), 0o600)
	}
	return reason
}
