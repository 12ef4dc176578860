package guestinit

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// deviceWait bounds how long Boot waits for a device node or fw_cfg entry
// to appear after its driver loaded (probing is asynchronous).
const deviceWait = 20 * time.Second

// Boot prepares the VM as the sandbox and execs the guest daemon in it as
// PID 1: GuestBinary --channel channel, with the host's environment added. It
// must run as PID 1 of the initramfs and returns only on failure. After it the
// root is the sandbox disk, with /dev, /proc, /sys, /dev/pts and /dev/shm
// mounted, as the ns runtime leaves it, and with Config.Network the network
// interface configured and /etc/resolv.conf written. A probe configuration powers the VM
// off instead.
func Boot(log *slog.Logger, channel string) error {
	fmt.Fprintln(os.Stderr, StartedMarker)
	if os.Getpid() != 1 {
		return errors.New("init: not PID 1 (--init is for the VM's initramfs)")
	}
	if err := mountEarly(); err != nil {
		return fmt.Errorf("init: mount early filesystems: %w", err)
	}
	if err := loadModules(); err != nil {
		return fmt.Errorf("init: load kernel modules: %w", err)
	}
	cfg, err := readConfig()
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if cfg.Probe {
		unix.Sync()
		err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
		return fmt.Errorf("init: probe: power off: %w", err)
	}
	if err := switchRoot(); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if err := mountLate(); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if cfg.Hostname != "" {
		if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
			return fmt.Errorf("init: set hostname: %w", err)
		}
	}
	if cfg.Network {
		// A sandbox that asked for a network must not run without it.
		if err := configureNetwork(log, "/"); err != nil {
			return fmt.Errorf("init: %w", err)
		}
	}
	log.Info("guest init done: starting the daemon", "root", RootDevice, "hostname", cfg.Hostname, "network", cfg.Network)
	argv := []string{GuestBinary, "--channel", channel}
	err = unix.Exec(GuestBinary, argv, daemonEnv(os.Environ(), cfg.Env))
	return fmt.Errorf("init: exec %s: %w", GuestBinary, err)
}

// daemonEnv is the kernel's environment for init with PATH defaulted and the
// host's variables added (they win).
func daemonEnv(base []string, extra map[string]string) []string {
	m := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			m[k] = v
		}
	}
	for k, v := range extra {
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

type mount struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
}

func doMounts(ms []mount) error {
	for _, m := range ms {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err)
		}
	}
	return nil
}

func mountEarly() error {
	return doMounts([]mount{
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
		{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	})
}

// loadModules loads the initramfs's modules in the listed order.
func loadModules() error {
	b, err := readLimit(ModuleOrderFile, 64<<10)
	if err != nil {
		return err
	}
	names, err := ParseModuleOrder(b)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := loadModule(filepath.Join(ModulesDir, n)); err != nil {
			return err
		}
	}
	return nil
}

func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	err = unix.FinitModule(int(f.Fd()), "", 0)
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("finit_module %s: %w", path, err)
	}
	return nil
}

// readConfig reads the host's configuration from fw_cfg; a VM without the
// entry gets the empty configuration.
func readConfig() (*Config, error) {
	dir := "/sys/firmware/qemu_fw_cfg"
	p := filepath.Join(dir, "by_name", FWCfgName, "raw")
	if err := waitFor(dir); err != nil {
		return nil, fmt.Errorf("fw_cfg: %w", err)
	}
	b, err := readLimit(p, MaxConfigBytes)
	if errors.Is(err, os.ErrNotExist) {
		return &Config{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fw_cfg %s: %w", FWCfgName, err)
	}
	return ParseConfig(b)
}

// switchRoot mounts the root disk on NewRoot, exposes the guest binary in
// it, moves the early mounts along, and makes it the process's root: the
// steps of switch_root(8) without its exec.
func switchRoot() error {
	if err := waitFor(RootDevice); err != nil {
		return fmt.Errorf("root disk: %w", err)
	}
	if err := doMounts([]mount{{RootDevice, NewRoot, "ext4", 0, "noinit_itable"}}); err != nil {
		return err
	}
	if err := exposeBinary(); err != nil {
		return err
	}
	for _, m := range []string{"/dev", "/proc", "/sys"} {
		target := filepath.Join(NewRoot, m)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m, target, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move %s: %w", m, err)
		}
	}
	if err := unix.Chdir(NewRoot); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move %s onto /: %w", NewRoot, err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	return unix.Chdir("/")
}

// exposeBinary bind-mounts /init (this binary, in the initramfs) read-only at
// GuestBinary in the new root, on a small tmpfs so the disk is not written
// beyond creating the directory.
func exposeBinary() error {
	dir := filepath.Join(NewRoot, filepath.Dir(GuestBinary))
	if err := doMounts([]mount{{"tmpfs", dir, "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "size=64k,mode=0755"}}); err != nil {
		return err
	}
	target := filepath.Join(NewRoot, GuestBinary)
	if err := os.WriteFile(target, nil, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("/init", target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the guest binary: %w", err)
	}
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make the guest binary read-only: %w", err)
	}
	return nil
}

func mountLate() error {
	return doMounts([]mount{
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"},
		{"tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
	})
}

func waitFor(path string) error {
	deadline := time.Now().Add(deviceWait)
	for {
		_, err := os.Stat(path)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %s: %w", path, deviceWait, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func readLimit(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}
