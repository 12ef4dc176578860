package ns

import (
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// A sandbox's user namespace is owned, in the node's, by the sandbox's own
// host uid (its UIDBase, the uid its root maps to), not by root.
//
// The kernel charges what a process does against per-user limits up the
// chain of user namespaces, each level to the user owning the namespace
// below it: inotify watches (fs.inotify.max_user_watches) and instances
// (fs.inotify.max_user_instances) among them. A namespace owned by root puts
// every sandbox's watches on root's one budget, shared by all sandboxes and
// the node's own root processes, so one sandbox could take it from all
// (catalogue B-7). Owned by its own uid, a sandbox has a budget of its own
// and cannot touch root's. Limits inside the sandbox's namespace
// (/proc/sys/user) would not do it: they count per uid inside, and the
// sandbox's root may raise them.
//
// The owner is the effective uid of the thread that clones the namespace, so
// startOwned runs cmd.Start on a thread of its own whose effective uid is
// owner — real and saved uid stay root, and SECBIT_NO_SETUID_FIXUP keeps its
// capabilities, which writing the child's uid and gid maps needs. The thread
// is never given back: its goroutine ends locked, so the thread exits with
// it. The child's credentials are reset by the new namespace (default
// securebits, full capabilities there only), so nothing of the change leaks
// into the sandbox.
func startOwned(cmd *exec.Cmd, owner uint32) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		errc <- startAs(cmd, owner)
	}()
	return <-errc
}

// secbitNoSetuidFixup keeps a thread's capabilities when its uids change.
const secbitNoSetuidFixup = 1 << 2

// startAs changes the current thread's effective uid to owner, keeping its
// capabilities, and starts cmd. Raw system calls: syscall.Setresuid and
// unix.Prctl would change every thread of the process.
func startAs(cmd *exec.Cmd, owner uint32) error {
	bits, _, errno := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_GET_SECUREBITS, 0, 0)
	if errno != 0 {
		return fmt.Errorf("start %s owned by uid %d: read securebits: %w", cmd.Path, owner, errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits|secbitNoSetuidFixup, 0); errno != 0 {
		return fmt.Errorf("start %s owned by uid %d: keep capabilities across the uid change: %w", cmd.Path, owner, errno)
	}
	keep := ^uintptr(0) // -1: leave that uid as it is
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(owner), keep); errno != 0 {
		return fmt.Errorf("start %s owned by uid %d: set the thread's effective uid: %w", cmd.Path, owner, errno)
	}
	return cmd.Start()
}
