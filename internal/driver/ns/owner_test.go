package ns

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/testenv"
)

// nsGetOwnerUID is ioctl NS_GET_OWNER_UID: the owner of a user namespace.
const nsGetOwnerUID = 0xb704

// userNSOwner returns the uid owning the user namespace of pid, as the node sees it.
func userNSOwner(t *testing.T, pid int) uint32 {
	t.Helper()
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open the user namespace of %d: %v", pid, err)
	}
	defer unix.Close(fd)
	var uid uint32
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), nsGetOwnerUID, uintptr(unsafe.Pointer(&uid))); errno != 0 {
		t.Fatalf("NS_GET_OWNER_UID of %d: %v", pid, errno)
	}
	return uid
}

// TestOwnInotifyBudget: a sandbox's user namespace is owned by the sandbox's
// own host uid, so the kernel's per-user inotify budget it draws from is its
// own: a sandbox can take every inotify instance fs.inotify.max_user_instances
// allows, and meanwhile a neighbour sandbox can too and the node's root still
// creates one. (Under a
// root-owned namespace the sandbox would share root's budget and take it:
// the test stops at the owner check before trying, so as not to take it
// from the node's other users of inotify.)
func TestOwnInotifyBudget(t *testing.T) {
	testenv.RequiresRoot(t)
	d := newDriver(t, testConfig(t, t.TempDir()))
	s := startSandbox(t, d, spec(t, "ino"))
	st, err := d.loadState("ino")
	if err != nil {
		t.Fatal(err)
	}
	if owner := userNSOwner(t, s.inst.Pid); owner != st.UIDBase {
		t.Fatalf("the sandbox's user namespace is owned by uid %d, want its own uid %d: its inotify watches and instances would count against uid %d's budget on the node", owner, st.UIDBase, owner)
	}
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	if err != nil {
		t.Fatal(err)
	}
	limit, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || limit > 4096 {
		t.Skipf("fs.inotify.max_user_instances is %q: too many to exhaust in a test", b)
	}
	out, _ := s.run(t, "!inotify")
	defer s.run(t, "!inotify-close")
	want := fmt.Sprintf("%d EMFILE", limit)
	if strings.TrimSpace(out) != want {
		t.Errorf("inotify instances a sandbox can hold: %q, want %q (all of fs.inotify.max_user_instances, none taken by others)", strings.TrimSpace(out), want)
	}
	// A driver of its own (startSandbox's cleanup waits for every execution
	// of its driver), over another uid range.
	cfg := testConfig(t, t.TempDir())
	cfg.UIDBase += uint32(cfg.Slots) * RangeSize
	neighbour := startSandbox(t, newDriver(t, cfg), spec(t, "ino2"))
	out, _ = neighbour.run(t, "!inotify")
	defer neighbour.run(t, "!inotify-close")
	if strings.TrimSpace(out) != want {
		t.Errorf("inotify instances a neighbour can hold while the first sandbox holds all it may: %q, want %q", strings.TrimSpace(out), want)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("the node's root creating an inotify instance while a sandbox holds all its own: %v", err)
	}
	unix.Close(fd)
}
