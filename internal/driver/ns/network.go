package ns

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/vishvananda/netlink"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandboxnet"
)

// createTap creates the tap device sandboxnet.IfName in the network namespace
// of process pid (the sandbox's init, not yet past its setup) and returns the
// device's host end. /dev/net/tun is root's (0600) and a tap is created in
// the network namespace of the process that opens it, so the driver opens it
// on a thread that has joined the sandbox's namespace, then returns.
//
// The tap is not persistent: it goes away when this file is closed. The file
// also holds the sandbox's network namespace alive, so whoever owns the link
// must close it when the execution ends (reads do not fail when the
// sandbox's processes are gone).
func createTap(pid int) (*driver.Link, error) {
	return inNetns(pid, func() (int, error) { return openTap() })
}

// ReopenLink gives a running execution a new network link after the holder
// of the old one went away (a node restart): the old tap went with it, so a
// new one is created in the sandbox's namespace and configured from here, as
// ns-init did at start. While the old link is still open this fails (the
// device name is taken) with ErrConflict.
func (d *Driver) ReopenLink(ctx context.Context, execID string) (*driver.Link, error) {
	st, err := d.loadState(execID)
	if err != nil {
		return nil, err
	}
	if !st.Network {
		return nil, fmt.Errorf("%w: ns: exec %s was started without a network", errdefs.ErrFailedPrecondition, execID)
	}
	if !driver.ProcAlive(st.Pid, st.StartTime) {
		return nil, fmt.Errorf("%w: ns: exec %s is not running", errdefs.ErrFailedPrecondition, execID)
	}
	link, err := inNetns(st.Pid, func() (int, error) {
		if _, err := netlink.LinkByName(sandboxnet.IfName); err == nil {
			return -1, fmt.Errorf("%w: ns: exec %s: %s still exists (its link is held elsewhere)", errdefs.ErrConflict, execID, sandboxnet.IfName)
		}
		fd, err := openTap()
		if err != nil {
			return -1, err
		}
		if err := sandboxnet.Configure(sandboxnet.IfName, true); err != nil {
			unix.Close(fd)
			return -1, err
		}
		return fd, nil
	})
	if err != nil {
		return nil, err
	}
	// The process may have exited while we worked; then the link is useless.
	if !driver.ProcAlive(st.Pid, st.StartTime) {
		link.Close()
		return nil, fmt.Errorf("%w: ns: exec %s exited", errdefs.ErrFailedPrecondition, execID)
	}
	return link, nil
}

// inNetns runs open on a thread inside the network namespace of pid and
// wraps the fd it returns as a tap link.
func inNetns(pid int, open func() (int, error)) (*driver.Link, error) {
	target, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("network: open the sandbox's network namespace: %w", err)
	}
	defer unix.Close(target)
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The thread changes namespace; it is only unlocked (given back to
		// the scheduler) once it is back in its own, else it dies with the
		// goroutine.
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- result{-1, fmt.Errorf("network: open own network namespace: %w", err)}
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{-1, fmt.Errorf("network: join the sandbox's network namespace: %w", err)}
			return
		}
		fd, err := open()
		if unix.Setns(self, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{fd, err}
	}()
	r := <-done
	if r.err != nil {
		return nil, r.err
	}
	return &driver.Link{File: os.NewFile(uintptr(r.fd), "tap:"+sandboxnet.IfName), Framing: driver.FramingTap}, nil
}

// openTap creates the tap in the calling thread's network namespace.
func openTap() (int, error) {
	// Non-blocking, so that the gateway reads it through the poller and a
	// Close interrupts a pending read.
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("network: open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(sandboxnet.IfName)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("network: %w", err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("network: create tap %s: %w", sandboxnet.IfName, err)
	}
	return fd, nil
}
