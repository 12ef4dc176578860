package seccomp

import (
	"encoding/binary"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/testenv"
)

// model is the filter's specification written as plain Go: the differential
// test checks the assembled BPF against it.
func model(nr, arch uint32, args [6]uint64) uint32 {
	if arch != AuditArchX86_64 {
		return RetKillProcess
	}
	if nr >= x32SyscallBit {
		return RetENOSYS
	}
	for _, d := range denied {
		if d.Nr == nr {
			return d.Ret
		}
	}
	low := func(i int) uint32 { return uint32(args[i]) }
	switch nr {
	case nrClone:
		if low(0)&cloneNamespaces != 0 {
			return RetEPERM
		}
	case nrUnshare:
		if low(0)&unshareNamespaces != 0 {
			return RetEPERM
		}
	case nrIoctl:
		for _, v := range deniedIoctls {
			if low(1) == v {
				return RetEPERM
			}
		}
	case nrPersonality:
		for _, v := range allowedPersonalities {
			if low(0) == v {
				return RetAllow
			}
		}
		return RetEPERM
	}
	return RetAllow
}

// seccompData lays out struct seccomp_data for the x/net/bpf interpreter,
// which loads 32-bit words big-endian where the kernel loads them in native
// (little-endian) order: each word is therefore written big-endian at the
// offset the kernel would read it from.
func seccompData(nr, arch uint32, args [6]uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[20+8*i:], uint32(a>>32))
	}
	return b
}

func newVM(t testing.TB) *bpf.VM {
	t.Helper()
	raw, err := Program()
	if err != nil {
		t.Fatalf("Program: %v", err)
	}
	var prog []bpf.Instruction
	for _, r := range raw {
		prog = append(prog, r.Disassemble())
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("NewVM: %v", err)
	}
	return vm
}

func run(t testing.TB, vm *bpf.VM, nr, arch uint32, args [6]uint64) uint32 {
	t.Helper()
	got, err := vm.Run(seccompData(nr, arch, args))
	if err != nil {
		t.Fatalf("Run(nr=%d): %v", nr, err)
	}
	return uint32(got)
}

func TestFilterMatchesModel(t *testing.T) {
	vm := newVM(t)
	argSets := [][6]uint64{
		{},
		{unix.CLONE_NEWUSER},
		{unix.CLONE_NEWNET | unix.CLONE_FILES},
		{unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD},
		{unix.CLONE_NEWTIME},
		{unix.CLONE_NEWUSER << 32},
		{0, unix.TIOCSTI},
		{0, unix.TIOCGWINSZ},
		{0x20000},
		{0xffffffff},
		{0x1234},
	}
	for _, arch := range []uint32{AuditArchX86_64, 0x40000003 /* i386 */, 0xc00000b7 /* aarch64 */} {
		for nr := uint32(0); nr < 600; nr++ {
			for _, args := range argSets {
				if got, want := run(t, vm, nr, arch, args), model(nr, arch, args); got != want {
					t.Fatalf("nr %d arch %#x args %#x: filter says %#x, model says %#x", nr, arch, args, got, want)
				}
			}
		}
	}
	for _, nr := range []uint32{x32SyscallBit, x32SyscallBit + 165, 0xffffffff} {
		if got := run(t, vm, nr, AuditArchX86_64, [6]uint64{}); got != RetENOSYS {
			t.Errorf("nr %#x: filter says %#x, want ENOSYS", nr, got)
		}
	}
}

func TestFilterDecisions(t *testing.T) {
	vm := newVM(t)
	tests := []struct {
		name string
		nr   uint32
		args [6]uint64
		want uint32
	}{
		{"read", unix.SYS_READ, [6]uint64{}, RetAllow},
		{"mount", unix.SYS_MOUNT, [6]uint64{}, RetEPERM},
		{"bpf", unix.SYS_BPF, [6]uint64{}, RetEPERM},
		{"clone thread", unix.SYS_CLONE, [6]uint64{unix.CLONE_VM | unix.CLONE_THREAD}, RetAllow},
		{"clone newuser", unix.SYS_CLONE, [6]uint64{unix.CLONE_NEWUSER}, RetEPERM},
		{"clone3", unix.SYS_CLONE3, [6]uint64{}, RetENOSYS},
		{"unshare files", unix.SYS_UNSHARE, [6]uint64{unix.CLONE_FILES}, RetAllow},
		{"unshare newns", unix.SYS_UNSHARE, [6]uint64{unix.CLONE_NEWNS}, RetEPERM},
		{"ioctl tiocsti", unix.SYS_IOCTL, [6]uint64{0, unix.TIOCSTI}, RetEPERM},
		{"ioctl winsize", unix.SYS_IOCTL, [6]uint64{0, unix.TIOCSWINSZ}, RetAllow},
		{"ioctl btrfs subvol create", unix.SYS_IOCTL, [6]uint64{0, IocBtrfsSubvolCreate}, RetEPERM},
		{"ioctl btrfs subvol create v2", unix.SYS_IOCTL, [6]uint64{0, IocBtrfsSubvolCreateV2}, RetEPERM},
		{"ioctl btrfs snap create", unix.SYS_IOCTL, [6]uint64{0, IocBtrfsSnapCreate}, RetEPERM},
		{"ioctl btrfs snap create v2", unix.SYS_IOCTL, [6]uint64{0, IocBtrfsSnapCreateV2}, RetEPERM},
		{"personality query", unix.SYS_PERSONALITY, [6]uint64{0xffffffff}, RetAllow},
		{"personality odd", unix.SYS_PERSONALITY, [6]uint64{0x0400000}, RetEPERM},
		{"clock_settime stays allowed", unix.SYS_CLOCK_SETTIME, [6]uint64{}, RetAllow},
	}
	for _, tt := range tests {
		if got := run(t, vm, uint32(tt.nr), AuditArchX86_64, tt.args); got != tt.want {
			t.Errorf("%s: got %#x, want %#x", tt.name, got, tt.want)
		}
	}
}

// TestNumbersMatchUnix checks the hand-written x86_64 numbers.
func TestNumbersMatchUnix(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("skipping: the table is x86_64 and x/sys/unix numbers are for " + runtime.GOARCH)
	}
	known := map[string]uintptr{
		"mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2, "pivot_root": unix.SYS_PIVOT_ROOT,
		"kexec_load": unix.SYS_KEXEC_LOAD, "kexec_file_load": unix.SYS_KEXEC_FILE_LOAD, "bpf": unix.SYS_BPF,
		"perf_event_open": unix.SYS_PERF_EVENT_OPEN, "keyctl": unix.SYS_KEYCTL, "add_key": unix.SYS_ADD_KEY,
		"request_key": unix.SYS_REQUEST_KEY, "ptrace": unix.SYS_PTRACE, "process_vm_readv": unix.SYS_PROCESS_VM_READV,
		"process_vm_writev": unix.SYS_PROCESS_VM_WRITEV, "init_module": unix.SYS_INIT_MODULE,
		"finit_module": unix.SYS_FINIT_MODULE, "delete_module": unix.SYS_DELETE_MODULE, "swapon": unix.SYS_SWAPON,
		"swapoff": unix.SYS_SWAPOFF, "reboot": unix.SYS_REBOOT, "setns": unix.SYS_SETNS,
		"open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT, "name_to_handle_at": unix.SYS_NAME_TO_HANDLE_AT,
		"userfaultfd": unix.SYS_USERFAULTFD, "iopl": unix.SYS_IOPL, "ioperm": unix.SYS_IOPERM, "acct": unix.SYS_ACCT,
		"quotactl": unix.SYS_QUOTACTL, "lookup_dcookie": unix.SYS_LOOKUP_DCOOKIE, "fsopen": unix.SYS_FSOPEN,
		"fsconfig": unix.SYS_FSCONFIG, "fsmount": unix.SYS_FSMOUNT, "fspick": unix.SYS_FSPICK,
		"move_mount": unix.SYS_MOVE_MOUNT, "open_tree": unix.SYS_OPEN_TREE, "mount_setattr": unix.SYS_MOUNT_SETATTR,
		"clone3": unix.SYS_CLONE3, "syslog": unix.SYS_SYSLOG, "io_uring_setup": unix.SYS_IO_URING_SETUP,
		"io_uring_enter": unix.SYS_IO_URING_ENTER, "io_uring_register": unix.SYS_IO_URING_REGISTER,
		"pidfd_getfd": unix.SYS_PIDFD_GETFD, "process_madvise": unix.SYS_PROCESS_MADVISE, "kcmp": unix.SYS_KCMP,
		"modify_ldt": unix.SYS_MODIFY_LDT, "vhangup": unix.SYS_VHANGUP, "uselib": unix.SYS_USELIB,
		"quotactl_fd": unix.SYS_QUOTACTL_FD, "_sysctl": unix.SYS__SYSCTL, "nfsservctl": unix.SYS_NFSSERVCTL,
		"create_module": unix.SYS_CREATE_MODULE, "get_kernel_syms": unix.SYS_GET_KERNEL_SYMS,
		"query_module": unix.SYS_QUERY_MODULE,
	}
	for _, d := range DeniedSyscalls() {
		want, ok := known[d.Name]
		if !ok {
			continue // newer than x/sys/unix (open_tree_attr)
		}
		if uintptr(d.Nr) != want {
			t.Errorf("%s: table has %d, x/sys/unix has %d", d.Name, d.Nr, want)
		}
	}
	for nr, want := range map[uint32]uintptr{nrClone: unix.SYS_CLONE, nrUnshare: unix.SYS_UNSHARE, nrIoctl: unix.SYS_IOCTL, nrPersonality: unix.SYS_PERSONALITY} {
		if uintptr(nr) != want {
			t.Errorf("arg-checked call %d: x/sys/unix has %d", nr, want)
		}
	}
}

func FuzzFilter(f *testing.F) {
	f.Add(uint32(165), uint32(AuditArchX86_64), uint64(0), uint64(0))
	f.Add(uint32(56), uint32(AuditArchX86_64), uint64(unix.CLONE_NEWUSER), uint64(0))
	f.Add(uint32(16), uint32(AuditArchX86_64), uint64(0), uint64(unix.TIOCSTI))
	vm := newVM(f)
	f.Fuzz(func(t *testing.T, nr, arch uint32, a0, a1 uint64) {
		args := [6]uint64{a0, a1}
		if got, want := run(t, vm, nr, arch, args), model(nr, arch, args); got != want {
			t.Fatalf("nr %d arch %#x args %#x: filter %#x, model %#x", nr, arch, args, got, want)
		}
	})
}

const childEnv = "SPACE_SECCOMP_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// childMain runs in a fresh mount namespace (so an unfiltered mount would do
// no harm), installs the filter and reports what each probe returned.
func childMain() int {
	runtime.LockOSThread()
	if err := Install(); err != nil {
		os.Stdout.WriteString("install: " + err.Error() + "\n")
		return 2
	}
	report := func(name string, err error) { os.Stdout.WriteString(name + "=" + errName(err) + "\n") }
	dir, _ := os.MkdirTemp("", "seccomp-probe")
	defer os.Remove(dir)
	report("mount", unix.Mount("tmpfs", dir, "tmpfs", 0, ""))
	report("unshare-user", unix.Unshare(unix.CLONE_NEWUSER))
	report("unshare-ns", unix.Unshare(unix.CLONE_NEWNS))
	report("unshare-files", unix.Unshare(unix.CLONE_FILES))
	_, _, e := unix.Syscall(unix.SYS_CLONE3, 0, 0, 0)
	report("clone3", errnoErr(e))
	return 0
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func errName(err error) string {
	switch err {
	case nil:
		return "ok"
	case unix.EPERM:
		return "EPERM"
	case unix.ENOSYS:
		return "ENOSYS"
	}
	return err.Error()
}

func TestInstallDeniesInProcess(t *testing.T) {
	testenv.RequiresRoot(t)
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	want := "mount=EPERM\nunshare-user=EPERM\nunshare-ns=EPERM\nunshare-files=ok\nclone3=ENOSYS\n"
	if got := string(out); !strings.Contains(got, want) {
		t.Fatalf("child reported:\n%s\nwant:\n%s", got, want)
	}
}
