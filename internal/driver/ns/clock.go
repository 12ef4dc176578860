package ns

// The sandbox's own clocks. Without a time namespace a sandbox reads the
// node's CLOCK_MONOTONIC and CLOCK_BOOTTIME: /proc/uptime and /proc/stat's
// btime say when the node booted, to the second, and two sandboxes that
// compare them can tell they share a node (catalogue B-9). ns-init
// therefore unshares a time namespace whose monotonic and boot-time clocks
// start at zero when the sandbox starts (their offsets are minus the node's
// clocks at that instant, whole seconds), and its exec of the guest daemon
// enters it, so every process of the sandbox counts from its own start:
// /proc/uptime is the sandbox's age, btime its start. CLOCK_REALTIME is not
// namespaced: wall-clock time stays the node's (capabilities, TLS and logs
// need it).
//
// The offsets are a property of the process, not of its threads: they are
// written to /proc/self/timens_offsets, which names the thread-group
// leader's namespace for children, so ns-init does all of it on the main
// thread (init below locks it there before main runs).

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

func init() {
	// Locked in init, main.main — and so InitMain — runs on the process's
	// main thread, the one /proc/self/timens_offsets belongs to.
	if len(os.Args) > 0 && os.Args[0] == InitHelper {
		runtime.LockOSThread()
	}
}

// timeNamespaces reports whether this kernel has time namespaces.
func timeNamespaces() bool {
	_, err := os.Stat("/proc/self/ns/time")
	return err == nil
}

// unshareClock gives the processes ns-init execs a time namespace whose
// monotonic and boot-time clocks read (about) zero now. It runs on the main
// thread, before any process enters the namespace (after that its offsets
// cannot change).
func unshareClock() error {
	if unix.Gettid() != unix.Getpid() {
		return errors.New("own clock: ns-init is not on its main thread (the time namespace's offsets are the main thread's)")
	}
	var mono, boot unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		return fmt.Errorf("own clock: read the monotonic clock: %w", err)
	}
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot); err != nil {
		return fmt.Errorf("own clock: read the boot-time clock: %w", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWTIME); err != nil {
		return fmt.Errorf("own clock: new time namespace: %w", err)
	}
	// Whole seconds: a clock may not go below zero in the namespace.
	offsets := fmt.Sprintf("monotonic %d 0\nboottime %d 0\n", -mono.Sec, -boot.Sec)
	if err := os.WriteFile("/proc/self/timens_offsets", []byte(offsets), 0); err != nil {
		return fmt.Errorf("own clock: set the time namespace's offsets: %w", err)
	}
	return nil
}
