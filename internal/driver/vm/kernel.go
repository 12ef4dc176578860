package vm

import (
	"fmt"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/vmimage"
)

// guestKernel is the kernel new VMs boot and the QEMU machine they run on.
type guestKernel struct {
	kernel  *vmimage.Kernel
	machine string
}

// bootFiles is what one VM boots: the kernel and its machine, and the
// initramfs built for the kernel and the execution's guest binary.
type bootFiles struct {
	*guestKernel
	initrd string
}

// current returns the kernel and machine of new VMs.
func (d *Driver) current() *guestKernel { return d.boot.Load() }

// Kernel returns the kernel new VMs boot.
func (d *Driver) Kernel() *vmimage.Kernel { return d.current().kernel }

// UseKernel makes new VMs boot k, on the machine Config.Machine resolves to
// for it (MachineAuto: microvm for the minimal kernel, q35 for the cloud
// kernel). A node starts on Debian's cloud kernel while the minimal one is
// compiled and moves to it when it is ready. VMs already running keep the
// kernel and machine they started with (recorded in their state), as do
// their checkpoints, which restore on the machine they were saved on; new
// template snapshots are made for the new kernel, whose keys differ.
func (d *Driver) UseKernel(k *vmimage.Kernel) error {
	if k == nil || k.Vmlinuz == "" {
		return fmt.Errorf("%w: vm: no guest kernel", errdefs.ErrInvalidArgument)
	}
	machine, err := resolveMachine(d.cfg.Machine, k)
	if err != nil {
		return err
	}
	old := d.boot.Swap(&guestKernel{kernel: k, machine: machine})
	d.log.Info("new VMs boot another kernel", "machine", machine, "kernel", k.Vmlinuz, "kernel_release", k.Release,
		"was_machine", old.machine, "was_kernel", old.kernel.Vmlinuz)
	return nil
}

// knownMachine reports whether m is a machine this driver can run a VM on.
func knownMachine(m string) bool { return m == MachineQ35 || m == MachineMicrovm }
