package seccomp

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Install sets no_new_privs and loads the filter on the calling thread. The
// filter is inherited across fork and exec, so a caller that locks its OS
// thread and then execs puts the whole sandbox under it. It must run after
// every mount the caller needs: the filter denies mounting.
func Install() error {
	if runtime.GOARCH != "amd64" {
		return fmt.Errorf("seccomp: the filter is written for x86_64, this is %s: refusing to run unfiltered", runtime.GOARCH)
	}
	raw, err := Program()
	if err != nil {
		return fmt.Errorf("seccomp: assemble filter: %w", err)
	}
	filters := SockFilters(raw)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: set no_new_privs: %w", err)
	}
	prog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filters)
	if errno != 0 {
		return fmt.Errorf("seccomp: load filter: %w", errno)
	}
	return nil
}
