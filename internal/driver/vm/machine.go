package vm

import (
	"fmt"
	"strconv"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/vmimage"
)

// Machines for Config.Machine: the QEMU machine type the VMs run on.
//
// q35 is a PC with PCI Express, SeaBIOS and ACPI; Debian's cloud kernel boots
// on it with virtio over PCI (modules loaded by the guest init). microvm has
// no PCI, no ACPI tables (acpi=off here) and the qboot firmware; its virtio
// devices sit on MMIO and are named to the kernel on its command line, which
// only a kernel built with VIRTIO_MMIO_CMDLINE_DEVICES understands: the
// minimal kernel of vmimage.BuildMinimalKernel. The guest configuration
// still comes over fw_cfg (QEMU's fw_cfg is at the PC's I/O port 0x510 on
// both machines; without ACPI the kernel is told so on its command line),
// so nothing about the sandbox is on the command line.
//
// MachineAuto picks microvm when the kernel is the minimal one and q35
// otherwise: measured on our 2-core TCG hosts (docs/PERFORMANCE.md), the
// minimal kernel on microvm reaches guest-ready in well under half the time
// of the cloud kernel on q35, and its template snapshots restore faster.
const (
	MachineAuto    = ""
	MachineQ35     = "q35"
	MachineMicrovm = "microvm"
)

// resolveMachine returns the machine VMs of kernel k run on: want if k boots
// on it, or for MachineAuto the machine k is built for.
func resolveMachine(want string, k *vmimage.Kernel) (string, error) {
	switch want {
	case MachineAuto:
		if k.Minimal {
			return MachineMicrovm, nil
		}
		return MachineQ35, nil
	case MachineMicrovm:
		if !k.Minimal {
			return "", fmt.Errorf("%w: vm: machine microvm needs the minimal guest kernel (vmimage.BuildMinimalKernel); %s has no virtio-mmio command-line devices",
				errdefs.ErrInvalidArgument, k.Vmlinuz)
		}
	case MachineQ35:
		if k.Minimal {
			return "", fmt.Errorf("%w: vm: machine q35 needs Debian's cloud kernel (vmimage.FetchKernel); the minimal kernel %s has no PCI",
				errdefs.ErrInvalidArgument, k.Vmlinuz)
		}
	default:
		return "", fmt.Errorf("%w: vm: machine %q: want q35, microvm or empty (by kernel)", errdefs.ErrInvalidArgument, want)
	}
	return want, nil
}

// machineLayout is what QEMU's command line and the kernel's depend on the
// machine for.
type machineLayout struct {
	// machine is the -M argument.
	machine string
	// disk, serial and rng are the -device arguments of the root disk
	// (drive "root"), the virtio-serial controller and the RNG (object
	// "rng0").
	disk, serial, rng string
	// nic is the -device argument of the network interface (netdev
	// netdevID); empty for a VM without a network.
	nic string
	// cmdline is put on the kernel command line before the init's
	// arguments.
	cmdline string
}

// The virtio-mmio transports of QEMU's microvm machine (hw/i386/microvm.c,
// stable since QEMU 5.0): with one I/O APIC (ioapic2=off) eight transports of
// 512 bytes from 0xfeb00000, on interrupts 5 to 12, on buses named
// virtio-mmio-bus.0 to .7.
const (
	microvmMMIOBase    = 0xfeb00000
	microvmMMIOSize    = 512
	microvmIRQBase     = 5
	microvmMMIOBusName = "virtio-mmio-bus."
)

// microvmNICTransport is the virtio-mmio transport of the network interface.
// Not 3: that transport's interrupt, 8, is the RTC's, which microvm has under
// TCG (rtc=auto); 4 has interrupt 9, free without ACPI (whose GED uses it).
const microvmNICTransport = 4

// layoutFor returns the layout of a machine, with a network interface when
// network is set; the empty machine (the state of a VM started before
// machines were recorded) is q35.
//
// microvm: no option ROMs, no PCIe, no ACPI, one I/O APIC, the ISA serial
// port for the console. The 8259 PIC and i8254 PIT stay: under TCG the
// kernel has no other way to learn the TSC's frequency than calibrating it
// against the PIT, whose interrupt needs the PIC; with pic=off it stalls at
// boot ("Unable to calibrate against PIT"). QEMU would name the virtio-mmio
// devices on the kernel command line itself, but appends them at its end,
// after the "--" that hands the rest to the init, where the kernel never
// sees them: so each device is put on a transport of its own and the driver
// names it before the "--" (auto-kernel-cmdline=off). Without ACPI, a reboot
// ends QEMU (-no-reboot) only by a triple fault (reboot=t), and the fw_cfg
// device is named to the kernel by its I/O port.
func layoutFor(machine string, network bool) machineLayout {
	if machine != MachineMicrovm {
		l := machineLayout{
			machine: "q35",
			disk:    "virtio-blk-pci,drive=root",
			serial:  "virtio-serial-pci",
			rng:     "virtio-rng-pci,rng=rng0",
		}
		if network {
			// romfile= : no iPXE option ROM (the kernel is loaded
			// directly; nothing boots from the network).
			l.nic = "virtio-net-pci," + nicOptions() + ",romfile="
		}
		return l
	}
	l := machineLayout{
		machine: "microvm,x-option-roms=off,pcie=off,acpi=off,ioapic2=off,isa-serial=on,auto-kernel-cmdline=off",
		cmdline: "reboot=t qemu_fw_cfg.ioport=12@0x510:0:1:4",
	}
	for i, dev := range []struct {
		field *string
		model string
	}{
		{&l.disk, "virtio-blk-device,drive=root"},
		{&l.serial, "virtio-serial-device"},
		{&l.rng, "virtio-rng-device,rng=rng0"},
	} {
		*dev.field = dev.model + ",bus=" + microvmMMIOBusName + strconv.Itoa(i)
		l.cmdline += microvmTransportArg(i)
	}
	if network {
		l.nic = "virtio-net-device," + nicOptions() + ",bus=" + microvmMMIOBusName + strconv.Itoa(microvmNICTransport)
		l.cmdline += microvmTransportArg(microvmNICTransport)
	}
	return l
}

// microvmTransportArg names virtio-mmio transport i to the kernel.
func microvmTransportArg(i int) string {
	return fmt.Sprintf(" virtio_mmio.device=%d@%#x:%d", microvmMMIOSize, microvmMMIOBase+i*microvmMMIOSize, microvmIRQBase+i)
}

// kernelCmdline is the guest kernel's command line on machine layout m.
func kernelCmdline(m machineLayout) string {
	return kernelBaseCmdline(m) + " -- --init --channel virtio:" + ChannelPort
}

// kernelBaseCmdline is the kernel's part of the command line on machine
// layout m, before the init's arguments.
func kernelBaseCmdline(m machineLayout) string {
	s := "console=ttyS0 quiet panic=-1"
	if m.cmdline != "" {
		s += " " + m.cmdline
	}
	return s
}
