package vm

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/vmimage"
)

var (
	cloudKernel   = &vmimage.Kernel{Vmlinuz: "/k/vmlinuz", SHA256: "cloud"}
	minimalKernel = &vmimage.Kernel{Vmlinuz: "/k/bzImage", SHA256: "minimal", Minimal: true}
)

func TestResolveMachine(t *testing.T) {
	for _, tc := range []struct {
		want   string
		kernel *vmimage.Kernel
		got    string // "" for an error
	}{
		{MachineAuto, cloudKernel, MachineQ35},
		{MachineAuto, minimalKernel, MachineMicrovm},
		{MachineQ35, cloudKernel, MachineQ35},
		{MachineMicrovm, minimalKernel, MachineMicrovm},
		{MachineMicrovm, cloudKernel, ""},
		{MachineQ35, minimalKernel, ""},
		{"pc", cloudKernel, ""},
	} {
		got, err := resolveMachine(tc.want, tc.kernel)
		if tc.got == "" {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("resolveMachine(%q, minimal=%v) = %q, %v; want InvalidArgument", tc.want, tc.kernel.Minimal, got, err)
			}
			continue
		}
		if err != nil || got != tc.got {
			t.Errorf("resolveMachine(%q, minimal=%v) = %q, %v; want %q", tc.want, tc.kernel.Minimal, got, err, tc.got)
		}
	}
	if _, err := New(Config{StateDir: t.TempDir(), Kernel: cloudKernel, QEMU: "/bin/true", Machine: MachineMicrovm}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("New with microvm and the cloud kernel = %v, want InvalidArgument", err)
	}
}

// argsAfter returns the arguments that follow each occurrence of flag.
func argsAfter(args []string, flag string) []string {
	var out []string
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			out = append(out, args[i+1])
		}
	}
	return out
}

func TestQEMUArgsPerMachine(t *testing.T) {
	for _, tc := range []struct {
		machine string
		wantM   string
		devices []string
		cmdline []string
	}{
		{"", "q35", []string{"virtio-blk-pci,drive=root", "virtio-serial-pci", "virtio-rng-pci,rng=rng0"}, nil},
		{MachineQ35, "q35", []string{"virtio-blk-pci,drive=root", "virtio-serial-pci", "virtio-rng-pci,rng=rng0"}, nil},
		{
			MachineMicrovm, "microvm,",
			[]string{"virtio-blk-device,drive=root,bus=virtio-mmio-bus.0", "virtio-serial-device,bus=virtio-mmio-bus.1", "virtio-rng-device,rng=rng0,bus=virtio-mmio-bus.2"},
			[]string{"qemu_fw_cfg.ioport=12@0x510:0:1:4", "reboot=t", "virtio_mmio.device=512@0xfeb00000:5",
				"virtio_mmio.device=512@0xfeb00200:6", "virtio_mmio.device=512@0xfeb00400:7"},
		},
	} {
		t.Run("machine="+tc.machine, func(t *testing.T) {
			st := &state{ExecID: "e1", MemoryMiB: 256, CPUs: 2, Accel: AccelTCG, Kernel: "/k", Initrd: "/i", Machine: tc.machine}
			args := qemuArgs(st)
			if m := argsAfter(args, "-M"); len(m) != 1 || !strings.HasPrefix(m[0], tc.wantM) {
				t.Errorf("-M %q, want one starting %q", m, tc.wantM)
			}
			devices := argsAfter(args, "-device")
			for _, want := range tc.devices {
				if !slices.Contains(devices, want) {
					t.Errorf("devices %q lack %q", devices, want)
				}
			}
			appendArg := argsAfter(args, "-append")
			if len(appendArg) != 1 {
				t.Fatalf("-append %q: want one", appendArg)
			}
			kernelArgs, initArgs, ok := strings.Cut(appendArg[0], " -- ")
			if !ok || initArgs != "--init --channel virtio:"+ChannelPort {
				t.Fatalf("-append %q: want the init's arguments after --", appendArg[0])
			}
			for _, want := range tc.cmdline {
				if !slices.Contains(strings.Fields(kernelArgs), want) {
					t.Errorf("kernel arguments %q lack %q", kernelArgs, want)
				}
			}
			if tc.cmdline == nil && (strings.Contains(kernelArgs, "fw_cfg") || strings.Contains(kernelArgs, "virtio_mmio")) {
				t.Errorf("q35 kernel arguments %q name fw_cfg or virtio-mmio devices (ACPI and PCI describe them)", kernelArgs)
			}
			joined := strings.Join(args, " ")
			for _, want := range []string{"-kernel /k", "-initrd /i", "-fw_cfg name=opt/space/config,file=" + guestConfig, "name=" + ChannelPort, "-sandbox on"} {
				if !strings.Contains(joined, want) {
					t.Errorf("args lack %q: %s", want, joined)
				}
			}
			if tc.machine == MachineMicrovm {
				for _, want := range []string{"pcie=off", "acpi=off", "ioapic2=off", "auto-kernel-cmdline=off"} {
					if !strings.Contains(joined, want) {
						t.Errorf("microvm args lack %q: %s", want, joined)
					}
				}
				if strings.Contains(joined, "-pci") {
					t.Errorf("microvm args name a PCI device: %s", joined)
				}
			}
		})
	}
}

// TestTemplateKeyHasMachine: q35 and microvm VMs of the same inputs never
// share a template snapshot.
func TestTemplateKeyHasMachine(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(img, []byte("image"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	spec := driver.Spec{ExecID: "e", SandboxID: "s", RootFS: img, GuestBinary: "/bin/true"}
	keys := map[string]string{}
	for _, k := range []*vmimage.Kernel{cloudKernel, minimalKernel} {
		d, err := New(Config{StateDir: t.TempDir(), Kernel: &vmimage.Kernel{Vmlinuz: k.Vmlinuz, SHA256: "same", Minimal: k.Minimal}, QEMU: "/bin/true"})
		if err != nil {
			t.Fatal(err)
		}
		key, err := d.templateKey(spec, fi, bootFiles{d.current(), "/c/initrd.cpio"}, AccelTCG, 256, 1, false)
		if err != nil {
			t.Fatal(err)
		}
		keys[d.Machine()] = key
	}
	if len(keys) != 2 || keys[MachineQ35] == keys[MachineMicrovm] {
		t.Errorf("template keys per machine %v: want two different keys", keys)
	}
}

// TestRestoreRefusesUnknownMachine: a checkpoint records its machine and
// restores on it whatever the driver's new VMs run (UseKernel); a machine the
// driver does not know is refused before anything starts.
func TestRestoreRefusesUnknownMachine(t *testing.T) {
	kdir := t.TempDir()
	for _, f := range []string{"k", "i"} {
		if err := os.WriteFile(filepath.Join(kdir, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, saved := range []string{"pc", "microvm,pcie=on", "q35 -device x"} {
		d, err := New(Config{StateDir: t.TempDir(), Kernel: cloudKernel, QEMU: "/bin/true"})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		meta, _ := json.Marshal(map[string]string{"accel": "tcg", "kernel": filepath.Join(kdir, "k"), "initrd": filepath.Join(kdir, "i"), "machine": saved})
		if err := os.WriteFile(filepath.Join(dir, cpMeta), meta, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := driver.DescribeFile(dir, cpMeta)
		if err != nil {
			t.Fatal(err)
		}
		cp := &driver.Checkpoint{Dir: dir, Runtime: "vm", MemoryMiB: 256, CPUs: 1, Files: []driver.CheckpointFile{f}}
		_, err = d.Restore(context.Background(), driver.Spec{ExecID: "r1", SandboxID: "r1"}, cp)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "machine") {
			t.Errorf("restore of a %q checkpoint = %v; want FailedPrecondition naming the machine", saved, err)
		}
		if _, err := os.Stat(d.execDir("r1")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused restore left state: %v", err)
		}
	}
}

// TestUseKernel: UseKernel moves new VMs to the machine of the new kernel,
// and refuses a kernel the configured machine cannot boot.
func TestUseKernel(t *testing.T) {
	d, err := New(Config{StateDir: t.TempDir(), Kernel: cloudKernel, QEMU: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.UseKernel(minimalKernel); err != nil || d.Machine() != MachineMicrovm || d.Kernel() != minimalKernel {
		t.Errorf("UseKernel(minimal) = %v; machine %q kernel %v, want microvm and the minimal kernel", err, d.Machine(), d.Kernel())
	}
	if err := d.UseKernel(nil); !errors.Is(err, errdefs.ErrInvalidArgument) || d.Kernel() != minimalKernel {
		t.Errorf("UseKernel(nil) = %v, kernel now %v; want InvalidArgument and no change", err, d.Kernel())
	}
	q35, err := New(Config{StateDir: t.TempDir(), Kernel: cloudKernel, QEMU: "/bin/true", Machine: MachineQ35})
	if err != nil {
		t.Fatal(err)
	}
	if err := q35.UseKernel(minimalKernel); !errors.Is(err, errdefs.ErrInvalidArgument) || q35.Machine() != MachineQ35 || q35.Kernel() != cloudKernel {
		t.Errorf("UseKernel(minimal) on a driver configured for q35 = %v (machine %q); want InvalidArgument and no change", err, q35.Machine())
	}
}
