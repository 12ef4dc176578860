// Command guest is the ns driver tests' stand-in for space-guest: it reads
// command lines from the channel on fd 3, runs each with "sh -c" and answers
// with the combined output followed by a line "@@exit N". Lines starting with
// "!" are probes run in this process (mount, unshare, inotify instances); "--alloc N" as argv
// allocates and touches N MiB (the memory limit test).
package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "--alloc" {
		alloc(os.Args[2])
		return
	}
	// The workload's tasks files (--workload-tasks, --daemon-tasks) are
	// space-guest's business: this stand-in leaves its commands in its own
	// groups.
	if len(os.Args) < 3 || os.Args[1] != "--channel" || os.Args[2] != "fd:3" {
		fmt.Fprintln(os.Stderr, "usage: guest --channel fd:3 [--workload-tasks FDS --daemon-tasks FDS]")
		os.Exit(2)
	}
	ch := os.NewFile(3, "channel")
	in := bufio.NewScanner(ch)
	for in.Scan() {
		out, code := run(in.Text())
		fmt.Fprintf(ch, "%s@@exit %d\n", out, code)
	}
}

func run(line string) (string, int) {
	switch line {
	case "!mount":
		return errnoName(unix.Mount("tmpfs", "/tmp", "tmpfs", 0, "")) + "\n", 0
	case "!unshare":
		return errnoName(unix.Unshare(unix.CLONE_NEWUSER)) + "\n", 0
	case "!unshare-ns":
		return errnoName(unix.Unshare(unix.CLONE_NEWNS)) + "\n", 0
	case "!subvol":
		return errnoName(subvolCreate("/", "inner")) + "\n", 0
	case "!inotify":
		return inotifyAll(), 0
	case "!inotify-close":
		for _, fd := range inotifyFDs {
			unix.Close(fd)
		}
		inotifyFDs = nil
		return "ok\n", 0
	}
	cmd := exec.Command("/bin/sh", "-c", line)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return string(out), 128 + int(ws.Signal())
		}
		return string(out), ee.ExitCode()
	case err != nil:
		return string(out) + err.Error() + "\n", 127
	}
	return string(out), 0
}

// inotifyFDs are the inotify instances "!inotify" opened, held until
// "!inotify-close".
var inotifyFDs []int

// inotifyAll opens inotify instances until the kernel refuses one and
// reports how many it holds and why the next was refused.
func inotifyAll() string {
	for {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			if errors.Is(err, unix.EMFILE) {
				return fmt.Sprintf("%d EMFILE\n", len(inotifyFDs))
			}
			return fmt.Sprintf("%d %v\n", len(inotifyFDs), err)
		}
		inotifyFDs = append(inotifyFDs, fd)
	}
}

func errnoName(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, unix.EPERM):
		return "EPERM"
	}
	return err.Error()
}

func alloc(mib string) {
	n, err := strconv.Atoi(mib)
	if err != nil {
		os.Exit(2)
	}
	var keep [][]byte
	for i := 0; i < n; i++ {
		b := make([]byte, 1<<20)
		for j := range b {
			b[j] = byte(j)
		}
		keep = append(keep, b)
	}
	fmt.Println("allocated", len(keep), "MiB")
}

// subvolCreate makes subvolume name in dir with BTRFS_IOC_SUBVOL_CREATE.
func subvolCreate(dir, name string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	var args struct {
		fd   int64
		name [4088]byte
	}
	copy(args.name[:], name)
	const iocSubvolCreate = 0x5000940e // _IOW(0x94, 14, struct btrfs_ioctl_vol_args)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), iocSubvolCreate, uintptr(unsafe.Pointer(&args))); e != 0 {
		return e
	}
	return nil
}
