// Package seccomp builds and installs the sandbox's seccomp filter: a deny list
// of the system calls that let a process reach past its namespaces (mounting,
// loading kernel code, tracing, other namespaces, kernel keyrings, raw I/O
// ports, …). It is pure Go: the classic-BPF program is assembled here with
// golang.org/x/net/bpf and installed with seccomp(2), no libseccomp.
//
// The filter targets x86_64 only. A system call made through another ABI
// (i386 via int 0x80, or x32) would bypass a table keyed by x86_64 numbers, so
// a foreign architecture kills the process and x32 numbers answer ENOSYS.
//
// A deny list (default allow) rather than an allow list is a deliberate trade:
// the sandbox runs arbitrary distributions and language runtimes whose system
// call needs we cannot enumerate, and user namespaces already strip every
// capability outside the sandbox. The list is the set of calls that remain
// dangerous for a root-in-userns process.
package seccomp

import (
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// AuditArchX86_64 is AUDIT_ARCH_X86_64, the arch value of seccomp_data for
// native x86_64 system calls.
const AuditArchX86_64 = 0xc000003e

// x32SyscallBit marks x32-ABI system call numbers on x86_64.
const x32SyscallBit = 0x40000000

// Filter results (SECCOMP_RET_* with the errno in the low 16 bits).
const (
	RetAllow       = 0x7fff0000
	RetKillProcess = 0x80000000
	retErrno       = 0x00050000
	// RetEPERM answers "operation not permitted".
	RetEPERM = retErrno | uint32(unix.EPERM)
	// RetENOSYS answers "function not implemented", which makes libc fall back
	// (clone3 → clone).
	RetENOSYS = retErrno | uint32(unix.ENOSYS)
)

// Offsets into struct seccomp_data (little-endian: the low half of a 64-bit
// argument comes first).
const (
	offNr   = 0
	offArch = 4
)

func offArgLow(i int) uint32 { return 16 + 8*uint32(i) }

// Namespace flags of clone(2) and unshare(2).
const (
	cloneNamespaces   = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	unshareNamespaces = cloneNamespaces | unix.CLONE_NEWTIME
)

// Deny is one system call answered with an error whatever its arguments.
type Deny struct {
	Name string
	Nr   uint32
	Ret  uint32
}

// x86_64 system call numbers, written out so that the filter is the same
// whatever GOARCH builds it (the test checks them against x/sys/unix on amd64).
var denied = []Deny{
	{"mount", 165, RetEPERM},
	{"umount2", 166, RetEPERM},
	{"pivot_root", 155, RetEPERM},
	{"swapon", 167, RetEPERM},
	{"swapoff", 168, RetEPERM},
	{"reboot", 169, RetEPERM},
	{"iopl", 172, RetEPERM},
	{"ioperm", 173, RetEPERM},
	{"create_module", 174, RetEPERM},
	{"init_module", 175, RetEPERM},
	{"delete_module", 176, RetEPERM},
	{"get_kernel_syms", 177, RetEPERM},
	{"query_module", 178, RetEPERM},
	{"quotactl", 179, RetEPERM},
	{"nfsservctl", 180, RetEPERM},
	{"acct", 163, RetEPERM},
	{"ptrace", 101, RetEPERM},
	{"syslog", 103, RetEPERM},
	{"uselib", 134, RetEPERM},
	{"vhangup", 153, RetEPERM},
	{"modify_ldt", 154, RetEPERM},
	{"_sysctl", 156, RetEPERM},
	{"lookup_dcookie", 212, RetEPERM},
	{"kexec_load", 246, RetEPERM},
	{"add_key", 248, RetEPERM},
	{"request_key", 249, RetEPERM},
	{"keyctl", 250, RetEPERM},
	{"perf_event_open", 298, RetEPERM},
	{"name_to_handle_at", 303, RetEPERM},
	{"open_by_handle_at", 304, RetEPERM},
	{"setns", 308, RetEPERM},
	{"process_vm_readv", 310, RetEPERM},
	{"process_vm_writev", 311, RetEPERM},
	{"kcmp", 312, RetEPERM},
	{"finit_module", 313, RetEPERM},
	{"kexec_file_load", 320, RetEPERM},
	{"bpf", 321, RetEPERM},
	{"userfaultfd", 323, RetEPERM},
	{"io_uring_setup", 425, RetEPERM},
	{"io_uring_enter", 426, RetEPERM},
	{"io_uring_register", 427, RetEPERM},
	{"open_tree", 428, RetEPERM},
	{"move_mount", 429, RetEPERM},
	{"fsopen", 430, RetEPERM},
	{"fsconfig", 431, RetEPERM},
	{"fsmount", 432, RetEPERM},
	{"fspick", 433, RetEPERM},
	{"clone3", 435, RetENOSYS},
	{"pidfd_getfd", 438, RetEPERM},
	{"process_madvise", 440, RetEPERM},
	{"mount_setattr", 442, RetEPERM},
	{"quotactl_fd", 443, RetEPERM},
	{"open_tree_attr", 467, RetEPERM},
}

// x86_64 numbers of the calls whose arguments decide.
const (
	nrIoctl       = 16
	nrClone       = 56
	nrPersonality = 135
	nrUnshare     = 272
)

// Denied ioctls: terminal ioctls that inject input into, or reconfigure,
// another process's terminal; and the btrfs ioctls that make a subvolume or
// a snapshot, which anyone who may write a directory on btrfs may call. A
// sandbox's root volume is bounded by its quota group, and a subvolume made
// inside it would get a quota group of its own, outside that limit
// (volume/btrfs quota.go).
var deniedIoctls = []uint32{
	unix.TIOCSTI, 0x541C, // TIOCLINUX
	IocBtrfsSnapCreate, IocBtrfsSubvolCreate, IocBtrfsSnapCreateV2, IocBtrfsSubvolCreateV2,
}

// The btrfs ioctls that create a subvolume (linux/btrfs.h; both argument
// structs are 4096 bytes).
const (
	IocBtrfsSnapCreate     = 0x50009401 // _IOW(0x94, 1, struct btrfs_ioctl_vol_args)
	IocBtrfsSubvolCreate   = 0x5000940e // _IOW(0x94, 14, struct btrfs_ioctl_vol_args)
	IocBtrfsSnapCreateV2   = 0x50009417 // _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2)
	IocBtrfsSubvolCreateV2 = 0x50009418 // _IOW(0x94, 24, struct btrfs_ioctl_vol_args_v2)
)

// allowedPersonalities are the personality(2) values ordinary programs use:
// PER_LINUX, PER_LINUX32, ADDR_NO_RANDOMIZE (alone and with PER_LINUX32) and the
// query 0xffffffff.
var allowedPersonalities = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// DeniedSyscalls returns the system calls denied whatever their arguments.
func DeniedSyscalls() []Deny { return append([]Deny(nil), denied...) }

// Program assembles the filter.
func Program() ([]bpf.RawInstruction, error) {
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: AuditArchX86_64, SkipTrue: 1},
		bpf.RetConstant{Val: RetKillProcess},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipFalse: 1},
		bpf.RetConstant{Val: RetENOSYS},
	}
	for _, d := range denied {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: d.Nr, SkipFalse: 1},
			bpf.RetConstant{Val: d.Ret})
	}
	prog = appendArgCheck(prog, nrClone, bitsSetDenies(0, cloneNamespaces))
	prog = appendArgCheck(prog, nrUnshare, bitsSetDenies(0, unshareNamespaces))
	prog = appendArgCheck(prog, nrIoctl, valuesDeny(1, deniedIoctls))
	prog = appendArgCheck(prog, nrPersonality, valuesAllow(0, allowedPersonalities))
	prog = append(prog, bpf.RetConstant{Val: RetAllow})
	return bpf.Assemble(prog)
}

// appendArgCheck appends "if nr == this { block }". Every block ends in a
// return, so the accumulator (the syscall number) need not be reloaded.
func appendArgCheck(prog []bpf.Instruction, nr uint32, block []bpf.Instruction) []bpf.Instruction {
	prog = append(prog, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: nr, SkipTrue: uint8(len(block))})
	return append(prog, block...)
}

// bitsSetDenies answers EPERM when any bit of mask is set in the low half of
// argument arg, else allows.
func bitsSetDenies(arg int, mask uint32) []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArgLow(arg), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: mask, SkipFalse: 1},
		bpf.RetConstant{Val: RetEPERM},
		bpf.RetConstant{Val: RetAllow},
	}
}

// valuesDeny answers EPERM when the low half of argument arg is one of vals.
func valuesDeny(arg int, vals []uint32) []bpf.Instruction {
	return valuesBlock(arg, vals, RetEPERM, RetAllow)
}

// valuesAllow allows when the low half of argument arg is one of vals, else
// answers EPERM.
func valuesAllow(arg int, vals []uint32) []bpf.Instruction {
	return valuesBlock(arg, vals, RetAllow, RetEPERM)
}

func valuesBlock(arg int, vals []uint32, match, otherwise uint32) []bpf.Instruction {
	block := []bpf.Instruction{bpf.LoadAbsolute{Off: offArgLow(arg), Size: 4}}
	for i, v := range vals {
		// Jump over the remaining comparisons and the "otherwise" return.
		block = append(block, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: uint8(len(vals) - i)})
	}
	return append(block, bpf.RetConstant{Val: otherwise}, bpf.RetConstant{Val: match})
}

// SockFilters converts an assembled program for seccomp(2).
func SockFilters(raw []bpf.RawInstruction) []unix.SockFilter {
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out
}
