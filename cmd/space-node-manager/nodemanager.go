package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/driver/ns"
	"github.com/spacesandbox/space/internal/driver/vm"
	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/guestbin"
	"github.com/spacesandbox/space/internal/hostbin"
	"github.com/spacesandbox/space/internal/nodemanager"
	"github.com/spacesandbox/space/internal/template"
	"github.com/spacesandbox/space/internal/vmimage"
	"github.com/spacesandbox/space/internal/volume"
	"github.com/spacesandbox/space/internal/volume/localvol"
)

// runNodeManager is space-node-manager (or `space node-manager`, which
// execs it): the node's only root process.
func runNodeManager(args []string) int {
	fs := flag.NewFlagSet("node-manager", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "data directory")
	socket := fs.String("socket", "", "unix socket to serve (default DATA/run/node-manager.sock)")
	guestBin := fs.String("guest-binary", "", "static space-guest binary (default: beside this binary)")
	allow := fs.String("allow-uid", "", "comma-separated uids besides root that may call (the uid of `space node`)")
	cacheDir := fs.String("cache-dir", defaultCacheDir(), "downloads shared by every data dir: the guest kernel, initramfs builds")
	diskQuota := fs.Bool("disk-quota", true, "bound each ns sandbox's disk at its disk_mib with btrfs quota groups (turns simple quotas on for the volume store's btrfs; false leaves its quotas as they are and disks unbounded)")
	kernelBuild := fs.String("kernel-build", kernelBuildBackground, "when the vm runtime's minimal kernel is not built: background (start on Debian's cloud kernel, build it at low priority, move new VMs to it), wait (move to one another process builds into --cache-dir), or off")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := validKernelBuild(*kernelBuild); err != nil {
		fmt.Fprintf(os.Stderr, "space-node-manager: %v\n", err)
		return 2
	}
	// A name no point has stops the node-manager: a typo in a test's
	// SPACE_FAILPOINTS must not silently disarm the crash it wants.
	if err := failpoint.FromEnvironment(); err != nil {
		fmt.Fprintf(os.Stderr, "space-node-manager: %v\n", err)
		return 2
	}
	log := hostbin.Logger().With("component", "node-manager")
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "space-node-manager: must run as root (it is the node's only privileged process)")
		return 1
	}
	dir, err := hostbin.DataDir(*dataDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "space-node-manager: %v\n", err)
		return 1
	}
	if *socket == "" {
		*socket = filepath.Join(dir, "run", "node-manager.sock")
	}
	if *guestBin == "" {
		if *guestBin, err = hostbin.Beside(hostbin.Guest); err != nil {
			fmt.Fprintf(os.Stderr, "space-node-manager: %v\n", err)
			return 1
		}
	}
	if err := guestbin.Check(*guestBin); err != nil {
		fmt.Fprintf(os.Stderr, "space-node-manager: %v\n", err)
		return 1
	}
	var uids []uint32
	for _, s := range strings.Split(*allow, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		u, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			fmt.Fprintf(os.Stderr, "space-node-manager: --allow-uid %q: %v\n", s, err)
			return 2
		}
		uids = append(uids, uint32(u))
	}
	if err := rootInputs(dir, *guestBin, rootTools...); err != nil {
		fmt.Fprintf(os.Stderr, "space-node-manager: %v\n", err)
		return 1
	}
	if err := rootDirs(dir, *cacheDir, *socket, uids); err != nil {
		fmt.Fprintf(os.Stderr, "space-node-manager: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	boundExit(ctx, exitBound, os.Stderr, os.Exit)
	lock, err := lockDataDir(ctx, dir, predecessorWait, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "space-node-manager: %v\n", err)
		return 1
	}
	defer lock.Close()
	vcfg := localvol.Config{DataDir: dir, NoDiskQuota: !*diskQuota}
	if err := serveNodeManager(ctx, vcfg, *cacheDir, *kernelBuild, *socket, *guestBin, uids, log); err != nil {
		fmt.Fprintf(os.Stderr, "space-node-manager: %v\n", err)
		return 1
	}
	return 0
}

// rootInputs makes RootPATH this process's PATH and refuses to start when
// what it runs or hands to every sandbox could be changed by a sandbox or
// another user (catalogue ): the programs of its PATH, its own binary
// (the VMM jail helper is a re-exec of it) and the guest binary copied into
// every sandbox must lie outside dataDir — where sandbox roots, volumes,
// disks and execution directories are — and be root's alone; so must each of
// tools found on RootPATH (one not installed is reported where it is
// needed).
func rootInputs(dataDir, guestBin string, tools ...string) error {
	if err := hostbin.SetRootPATH(dataDir); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("the path of this binary: %w", err)
	}
	for _, p := range []string{self, guestBin} {
		if err := hostbin.CheckRootExec(p, dataDir); err != nil {
			return err
		}
	}
	for _, name := range tools {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		if err := hostbin.CheckRootExec(p, dataDir); err != nil {
			return err
		}
	}
	return nil
}

// rootDirs refuses to start when a directory the node-manager keeps its
// state in or reads from could be changed by another user than root or the
// uids it serves (catalogue A-9; docs/SECURITY.md lists every input): the
// data directory, whose execution state files name the processes it kills
// and the uids it claims; the cache directory, whose guest kernel every VM
// boots and whose accelerator probe decides KVM or TCG; the directory of its
// socket, where another socket could be put in its place.
func rootDirs(dataDir, cacheDir, socket string, uids []uint32) error {
	for _, d := range []struct{ flag, dir string }{
		{"--data-dir", dataDir}, {"--cache-dir", cacheDir}, {"--socket", filepath.Dir(socket)},
	} {
		if d.dir == "" {
			continue
		}
		if err := hostbin.CheckRootDir(d.dir, uids...); err != nil {
			return fmt.Errorf("%s: %w", d.flag, err)
		}
	}
	return nil
}

// rootTools are the programs the node-manager runs by name.
var rootTools = []string{"qemu-system-x86_64", "btrfs", "mkfs.btrfs", "mount", "umount", "losetup", "cp", "debootstrap"}

// newVMDriver sets up the vm runtime when QEMU is installed, on the kernel
// kernels chooses; later says that kernels.follow may move it to the minimal
// kernel.
func newVMDriver(ctx context.Context, volumesDir string, kernels *vmKernels, log *slog.Logger) (d *vm.Driver, later bool, err error) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return nil, false, fmt.Errorf("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
	}
	k, later, err := kernels.first(ctx)
	if err != nil {
		return nil, false, err
	}
	// The kernel is shared by every data dir; template snapshots and their
	// disks stay on the volume store, beside the executions' disks, so a
	// restore clones them by reflink.
	d, err = vm.New(vm.Config{StateDir: filepath.Join(volumesDir, "vm"), Kernel: k, CacheDir: filepath.Join(volumesDir, "vm-cache"), Log: log})
	return d, later, err
}

func serveNodeManager(ctx context.Context, vcfg localvol.Config, cacheDir, kernelBuild, socket, guestBin string, uids []uint32, log *slog.Logger) error {
	dataDir := vcfg.DataDir
	vols, err := localvol.Open(ctx, vcfg, log)
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	// The storage stays mounted while sandboxes use it: they outlive this
	// process. With none left it is unmounted so nothing is left behind.
	defer releaseStorage(vols, log)
	nsd, err := ns.New(ns.Config{StateDir: filepath.Join(dataDir, "ns"), Log: log})
	if err != nil {
		return err
	}
	drivers := map[string]driver.Driver{"ns": nsd}
	layout := volume.Layout{Root: vols.Dir}
	srv, err := nodemanager.NewServer(nodemanager.Config{
		Socket: socket, AllowedUIDs: uids, GuestBinary: guestBin, Storage: vols,
		Drivers: drivers,
		Build: func(ctx context.Context, source, dest string, progress io.Writer) error {
			return buildTemplate(ctx, cacheDir, source, dest, progress)
		},
		ImageRuntimes: map[string]bool{"vm": true},
		// Images live on the same filesystem as the VM state, so per-sandbox
		// disk clones are reflinks.
		ImageDir: filepath.Join(vols.Dir, "vm-images"),
		BuildImage: func(ctx context.Context, dir, dest string) error {
			return vmimage.RootImage{Dir: dir, Dest: dest}.Build(ctx)
		},
		TemplateDir:  layout.Template,
		SnapshotDir:  filepath.Join(vols.Dir, "node-snapshots"),
		SnapshotPath: layout.Snapshot,
	}, log)
	if err != nil {
		return err
	}
	// The vm runtime may first download a kernel: serve the ns runtime
	// meanwhile, and offer vm once it is ready.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	vmReady := make(chan struct{})
	if _, err := exec.LookPath("qemu-system-x86_64"); err == nil {
		// Reported to the control plane as coming, so that creates
		// wait for it instead of running elsewhere (or on ns).
		srv.ExpectDriver("vm")
	}
	kernels := newVMKernels(cacheDir, kernelBuild, func(line string) { srv.SetRuntimeStatus("vm", line) }, log)
	go func() {
		defer close(vmReady)
		vmd, later, err := newVMDriver(ctx, vols.Dir, kernels, log)
		if err != nil {
			srv.DropDriver("vm")
			srv.SetRuntimeStatus("vm", "not available: "+err.Error())
			if ctx.Err() == nil {
				log.Warn("the vm runtime is not available on this node", "reason", err)
			}
			return
		}
		srv.AddDriver("vm", vmd)
		log.Info("vm runtime ready", "machine", vmd.Machine())
		if later {
			// Both run until ctx ends: vmReady waits for the build too.
			follow := make(chan struct{})
			defer func() { <-follow }()
			go func() {
				defer close(follow)
				kernels.follow(ctx, vmd.Kernel(), vmd.UseKernel)
			}()
		}
		// QEMU outlives this process by design; a VM whose directory the
		// user removed is stopped (the next node-manager finds those
		// removed while none ran).
		if err := vmd.WatchRemoved(ctx, vm.DefaultRemovedCheckEvery); err != nil {
			log.Warn("VMs whose directory is removed are not stopped", "err", err)
		}
	}()
	err = srv.Run(ctx)
	cancel()
	<-vmReady
	return err
}

func releaseStorage(vols *localvol.Store, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if inUse, err := volumesInUse(vols.Dir); err != nil || inUse > 0 {
		log.Info("storage stays mounted: sandboxes still use it", "volumes", inUse, "err", err)
		vols.Close()
		return
	}
	if err := vols.Unmount(ctx); err != nil {
		log.Warn("unmount storage", "err", err)
	}
}

func defaultCacheDir() string {
	if d := os.Getenv("SPACE_CACHE_DIR"); d != "" {
		return d
	}
	return "/var/cache/space"
}

// buildTemplate fills dest from a template source; builtin:minimal,
// builtin:base and builtin:code-interpreter are the templates every node can
// make without input (the last keeps its Debian tree in cacheDir).
func buildTemplate(ctx context.Context, cacheDir, source, dest string, progress io.Writer) error {
	switch source {
	case "builtin:minimal":
		return template.Minimal(ctx, dest)
	case "builtin:base":
		return template.Base(ctx, dest, progress)
	case "builtin:" + template.CodeInterpreterName:
		return template.CodeInterpreter(ctx, dest, cacheDir, progress)
	}
	src, err := template.ParseSource(source)
	if err != nil {
		return err
	}
	return template.Build(ctx, src, dest, progress)
}

// volumesInUse counts the sandbox volumes under a volume store root.
func volumesInUse(root string) (int, error) {
	entries, err := os.ReadDir(volume.Layout{Root: root}.VolumesDir())
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	return len(entries), err
}
