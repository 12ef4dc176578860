// Package benchbase measures the bare primitives SPACE's runtimes are built
// on, on the local machine and with no SPACE code on the timed path, so that
// the figures of `space bench` can be read against what the primitives
// themselves cost here:
//
//   - unshare_chroot_spawn: util-linux unshare puts a process in fresh PID,
//     mount, UTS, IPC and network namespaces and chroots it into a throwaway
//     root holding only Debian's static busybox; timed from the start of
//     unshare until `true` has exited and unshare with it.
//   - qemu_cold_boot: QEMU boots the vm runtime's guest kernel, on the same
//     machine type and accelerator as the runtime's VMs, with a tiny
//     initramfs (busybox and a shell /init) whose init prints a marker on the
//     serial console and reboots (which ends QEMU, run with -no-reboot);
//     timed from the start of QEMU until the marker is read: boot to
//     userspace.
//   - qemu_snapshot_restore: the same guest, booted once with an init that
//     prints a counter every 10 ms, is paused and its state saved with QMP
//     migrate into a file (as the runtime's checkpoints are); then each
//     round starts QEMU with -S -incoming from that file, waits until the
//     state is loaded, sends cont, and is timed from the start of QEMU until
//     the guest prints its next counter, which must continue the saved one.
//
// Everything runs in a temporary directory that is removed afterwards; QEMU
// and unshare run in process groups of their own that are killed at the end
// of each round. The baselines need root (namespaces, chroot), unshare and
// chroot, /bin/busybox from busybox-static, qemu-system-x86_64 and the guest
// kernel; Check names whatever is missing.
package benchbase
