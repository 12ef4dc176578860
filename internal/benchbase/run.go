package benchbase

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/benchstat"
	"github.com/spacesandbox/space/internal/driver/vm"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/vmimage"
)

// Names of the rows the baselines add to a report.
const (
	RowSpawn   = "unshare_chroot_spawn"
	RowBoot    = "qemu_cold_boot"
	RowRestore = "qemu_snapshot_restore"
)

// Config configures a run of the baselines.
type Config struct {
	// Count is the number of timed rounds of each baseline.
	Count int
	// CacheDir is where the vm runtime's guest kernel is cached (package
	// vmimage), and its accelerator probe's result; default DefaultCacheDir.
	CacheDir string
	// Busybox is the static busybox put in the chroot and the initramfs;
	// default DefaultBusybox.
	Busybox string
	// TempDir is where the run's temporary directory is made; default
	// os.TempDir().
	TempDir string
	// Log receives the vm driver's warnings (the accelerator probe's);
	// default: discarded.
	Log *slog.Logger
	// MachineCPU adds the machine's busy CPU time per round (/proc/stat) to
	// the spawn and cold-boot rows. The restore row has none: its rounds
	// share the run with the untimed save that precedes them.
	MachineCPU bool
}

// DefaultCacheDir is the cache directory the node's vm runtime uses by
// default: $SPACE_CACHE_DIR, else /var/cache/space (`space node-manager
// --cache-dir`).
func DefaultCacheDir() string {
	if d := os.Getenv("SPACE_CACHE_DIR"); d != "" {
		return d
	}
	return "/var/cache/space"
}

// Tools are the host programs and files the baselines run.
type Tools struct {
	Unshare, Chroot, QEMU, Busybox string
}

// Check finds what the baselines need: root, unshare, chroot,
// qemu-system-x86_64 and a static busybox at busybox (DefaultBusybox if
// empty). The error, of class errdefs.ErrFailedPrecondition, names
// everything that is missing and where it comes from.
func Check(busybox string) (Tools, error) {
	if busybox == "" {
		busybox = DefaultBusybox
	}
	var missing []string
	if uid := os.Geteuid(); uid != 0 {
		missing = append(missing, fmt.Sprintf("root (this runs as uid %d; namespaces and chroot need root)", uid))
	}
	look := func(name, pkg string) string {
		p, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s on PATH (apt-get install %s)", name, pkg))
		}
		return p
	}
	t := Tools{
		Unshare: look("unshare", "util-linux"),
		Chroot:  look("chroot", "coreutils"),
		QEMU:    look("qemu-system-x86_64", "qemu-system-x86"),
		Busybox: busybox,
	}
	if err := checkStaticELF(busybox); err != nil {
		missing = append(missing, fmt.Sprintf("a static busybox (apt-get install busybox-static): %v", err))
	}
	if len(missing) > 0 {
		return t, fmt.Errorf("%w: the baselines need %s", errdefs.ErrFailedPrecondition, strings.Join(missing, "; "))
	}
	return t, nil
}

// GuestKernel returns the kernel the node's vm runtime boots, chosen as the
// node chooses it: the minimal kernel if it is built in cacheDir, else
// Debian's cloud kernel (fetched into cacheDir with apt if it is not there).
func GuestKernel(ctx context.Context, cacheDir string) (*vmimage.Kernel, error) {
	k, err := vmimage.CachedMinimalKernel(ctx, cacheDir)
	if err == nil {
		return k, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	k, ferr := vmimage.FetchKernel(ctx, cacheDir)
	if ferr != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: no guest kernel in %s: %v; and %v", errdefs.ErrFailedPrecondition, cacheDir, err, ferr)
	}
	return k, nil
}

// prepareGuest finds the guest kernel, writes the initramfs into dir and
// asks a vm driver over a scratch state directory in dir which machine and
// accelerator the runtime's VMs get (probing KVM by booting this initramfs,
// as the driver does, unless the probe's result for this host boot is
// cached in cacheDir).
func prepareGuest(ctx context.Context, cfg Config, tools Tools, dir string) (*guest, error) {
	k, err := GuestKernel(ctx, cfg.CacheDir)
	if err != nil {
		return nil, err
	}
	g := &guest{qemu: tools.QEMU, kernel: k.Vmlinuz, release: k.Release, initrd: filepath.Join(dir, "initramfs.cpio")}
	if err := buildInitramfs(g.initrd, tools.Busybox); err != nil {
		return nil, err
	}
	d, err := vm.New(vm.Config{StateDir: filepath.Join(dir, "vm"), Kernel: k, CacheDir: cfg.CacheDir, QEMU: tools.QEMU, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	g.machine, g.accel = d.Machine(), d.Accel(ctx, g.initrd)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return g, nil
}

// Run measures the three baselines, cfg.Count rounds each, and adds their
// rows (RowSpawn, RowBoot, RowRestore) and notes to report. Everything it
// makes lives in a temporary directory removed before it returns; every
// process it starts is killed by then.
func Run(ctx context.Context, cfg Config, report *benchstat.Report) error {
	if cfg.Count < 1 {
		return fmt.Errorf("%w: baselines: count %d: want at least 1", errdefs.ErrInvalidArgument, cfg.Count)
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = DefaultCacheDir()
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	tools, err := Check(cfg.Busybox)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(cfg.TempDir, "space-baseline-")
	if err != nil {
		return fmt.Errorf("baselines: %w", err)
	}
	defer os.RemoveAll(dir)
	if strings.Contains(dir, ",") {
		return fmt.Errorf("%w: baselines: temporary directory %s has a comma, which QEMU's options cannot carry (set TMPDIR)", errdefs.ErrInvalidArgument, dir)
	}
	g, err := prepareGuest(ctx, cfg, tools, dir)
	if err != nil {
		return fmt.Errorf("baselines: guest: %w", err)
	}

	c0, err := cfg.readCPU()
	if err != nil {
		return err
	}
	spawn, err := spawnBaseline(ctx, tools, dir, cfg.Count)
	if err != nil {
		return fmt.Errorf("baseline %s: %w", RowSpawn, err)
	}
	if spawn, err = cfg.spreadCPU(spawn, c0); err != nil {
		return err
	}
	report.Add(RowSpawn, spawn)
	report.Note(RowSpawn, "util-linux unshare --fork --pid --mount --uts --ipc --net, chroot into busybox-static, /bin/true; start to exit")

	if c0, err = cfg.readCPU(); err != nil {
		return err
	}
	boot, err := coldBoot(ctx, g, cfg.Count)
	if err != nil {
		return fmt.Errorf("baseline %s: %w", RowBoot, err)
	}
	if boot, err = cfg.spreadCPU(boot, c0); err != nil {
		return err
	}
	report.Add(RowBoot, boot)
	report.Note(RowBoot, fmt.Sprintf("QEMU start to the init's first console line: %s, %s, kernel %s, %d MiB, 1 vCPU, busybox initramfs",
		g.machine, g.accel, g.release, guestMemoryMiB))

	restore, saved, timings, err := snapshotRestore(ctx, g, dir, cfg.Count)
	if err != nil {
		return fmt.Errorf("baseline %s: %w", RowRestore, err)
	}
	report.Add(RowRestore, restore)
	conts := make([]time.Duration, len(timings))
	for i, t := range timings {
		conts[i] = t.cont
	}
	report.Note(RowRestore, fmt.Sprintf("QEMU start (-incoming) to the guest's next console line after cont; cont answered at p50 %s; state file %.1f MiB, saved in %s",
		benchstat.Summarize(conts, 0, 0).P50.Round(100*time.Microsecond), float64(saved.size)/benchstat.MiB, saved.took.Round(time.Millisecond)))
	return nil
}

// readCPU samples the machine's CPU when cfg asks for it.
func (cfg Config) readCPU() (benchstat.CPUTimes, error) {
	if !cfg.MachineCPU {
		return benchstat.CPUTimes{}, nil
	}
	return benchstat.ReadCPUTimes()
}

// spreadCPU adds the machine's CPU since start, per round, to s when cfg
// asks for it.
func (cfg Config) spreadCPU(s benchstat.Summary, start benchstat.CPUTimes) (benchstat.Summary, error) {
	if !cfg.MachineCPU {
		return s, nil
	}
	end, err := benchstat.ReadCPUTimes()
	if err != nil {
		return s, err
	}
	return s.WithCPU(end.BusySince(start)), nil
}
