package ns

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
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
		fd, err := openTap()
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
