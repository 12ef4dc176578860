package ns

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/sandboxnet"
	"github.com/spacesandbox/space/internal/seccomp"
)

// The fds ns-init inherits (see initCommand).
const (
	channelFD = 3
	syncFD    = 4
)

// Paths inside the sandbox.
const (
	// GuestPath is where the guest binary is bind-mounted, read-only.
	GuestPath = "/.space/space-guest"
	// stageDir is where ns-init assembles the new root before pivot_root. A
	// tmpfs is mounted on it in ns-init's private mount namespace, so the
	// host's directory is neither used nor changed.
	stageDir = "/tmp"
	newRoot  = stageDir + "/root"
)

// InitMain is the sandbox's first process (InitHelper; args are unused). It runs in the new
// namespaces, as root of the sandbox's user namespace, with the guest channel
// on fd 3 and the sync socket on fd 4. It never returns: it execs the guest
// daemon, or reports the error to the parent and exits 1.
func InitMain(args []string) {
	// Every step, up to and including exec, runs on this one OS thread: the
	// cgroup namespace and the seccomp filter are per thread.
	runtime.LockOSThread()
	err := initSandbox()
	msg := "ns-init: " + err.Error()
	_, _ = unix.Write(syncFD, []byte(msg))
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(1)
}

func initSandbox() error {
	unix.CloseOnExec(syncFD)
	cfg, rootFD, guestFD, tasks, err := receiveConfig()
	if err != nil {
		return err
	}
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("new cgroup namespace: %w", err)
	}
	if cfg.OwnClock {
		if err := unshareClock(); err != nil {
			return err
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", stageDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=700,size=64k"); err != nil {
		return fmt.Errorf("mount staging tmpfs on %s: %w", stageDir, err)
	}
	if err := os.Mkdir(newRoot, 0o755); err != nil {
		return fmt.Errorf("staging: %w", err)
	}
	if err := unix.MoveMount(rootFD, "", unix.AT_FDCWD, newRoot, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach rootfs: %w", err)
	}
	unix.Close(rootFD)
	if err := setupRoot(guestFD); err != nil {
		return err
	}
	unix.Close(guestFD)
	if cfg.Network {
		// Before pivot_root: /dev/net/tun is the host's.
		if err := setupNetwork(); err != nil {
			return err
		}
	}
	if err := pivot(); err != nil {
		return err
	}
	if cfg.Network {
		if err := writeResolvConf(); err != nil {
			return err
		}
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	// Nothing but stdio, the channel, the tasks files (reserve.go) and the
	// (close-on-exec) sync socket reaches the guest.
	if err := unix.CloseRange(channelFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close inherited fds: %w", err)
	}
	argv := []string{GuestPath, "--channel", fmt.Sprintf("fd:%d", channelFD)}
	if len(tasks) > 0 {
		flags, err := placeTasks(tasks, cfg.WorkloadTasks)
		if err != nil {
			return err
		}
		argv = append(argv, flags...)
	}
	if err := seccomp.Install(); err != nil {
		return err
	}
	if err := unix.Exec(GuestPath, argv, cfg.Env); err != nil {
		return fmt.Errorf("exec %s: %w", GuestPath, err)
	}
	return errors.New("exec returned")
}

// setupNetwork configures the tap device the parent created in the
// sandbox's network namespace (createTap). ns-init never holds the device's
// other end: the guest can use the interface, never read its traffic.
func setupNetwork() error {
	return sandboxnet.Configure(sandboxnet.IfName, true)
}

// writeResolvConf points the sandbox's resolver at the gateway. It runs after
// pivot_root, so a symlink in the sandbox's /etc resolves inside the sandbox;
// it is replaced, not followed.
func writeResolvConf() error {
	if err := os.MkdirAll("/etc", 0o755); err != nil {
		return fmt.Errorf("network: /etc: %w", err)
	}
	if fi, err := os.Lstat("/etc/resolv.conf"); err == nil && !fi.Mode().IsRegular() {
		if err := os.Remove("/etc/resolv.conf"); err != nil {
			return fmt.Errorf("network: replace /etc/resolv.conf: %w", err)
		}
	}
	f, err := os.OpenFile("/etc/resolv.conf", os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("network: write /etc/resolv.conf: %w", err)
	}
	_, err = f.Write(sandboxnet.ResolvConf())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("network: write /etc/resolv.conf: %w", err)
	}
	return nil
}

// receiveConfig reads the parent's one message: JSON and two mount fds.
func receiveConfig() (*initConfig, int, int, []int, error) {
	buf := make([]byte, maxInitMessage)
	oob := make([]byte, unix.CmsgSpace(maxInitFDs*4))
	n, oobn, flags, _, err := unix.Recvmsg(syncFD, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, -1, -1, nil, fmt.Errorf("read config: %w", err)
	}
	if flags&unix.MSG_CTRUNC != 0 {
		return nil, -1, -1, nil, errors.New("read config: more fds than expected")
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, -1, -1, nil, fmt.Errorf("read config: want one control message with the fds (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) < 2 {
		return nil, -1, -1, nil, fmt.Errorf("read config: want at least two fds, got %d (%v)", len(fds), err)
	}
	var cfg initConfig
	if err := json.Unmarshal(buf[:n], &cfg); err != nil {
		return nil, -1, -1, nil, fmt.Errorf("read config: %w", err)
	}
	if err := driver.ValidHostname(cfg.Hostname); err != nil {
		return nil, -1, -1, nil, err
	}
	if len(fds) != 2+2*cfg.WorkloadTasks {
		return nil, -1, -1, nil, fmt.Errorf("read config: %d fds for %d workload tasks files, want %d", len(fds), cfg.WorkloadTasks, 2+2*cfg.WorkloadTasks)
	}
	return &cfg, fds[0], fds[1], fds[2:], nil
}

// maxInitFDs bounds the fds of the config message: the root, the guest
// binary and two tasks files per controller of reserveControllers.
const maxInitFDs = 2 + 2*4

// placeTasks makes the tasks files open across exec (every other descriptor
// above the channel is close-on-exec by then) and returns the daemon's
// flags naming them: the first n are the workload's, the next n the
// sandbox group's. The files keep their numbers: a number picked here could
// be one the Go runtime holds.
func placeTasks(fds []int, n int) ([]string, error) {
	names := make([]string, len(fds))
	for i, fd := range fds {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return nil, fmt.Errorf("tasks files: %w", err)
		}
		names[i] = strconv.Itoa(fd)
	}
	return []string{"--workload-tasks", strings.Join(names[:n], ","), "--daemon-tasks", strings.Join(names[n:], ",")}, nil
}

// setupRoot mounts /proc, /dev, /sys, /tmp and the guest binary under newRoot.
func setupRoot(guestFD int) error {
	for _, dir := range []string{"proc", "dev", "sys", ".space"} {
		if err := ensureDir(dir); err != nil {
			return err
		}
	}
	if err := unix.Mount("proc", newRoot+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := setupDev(); err != nil {
		return err
	}
	if err := setupSys(); err != nil {
		return err
	}
	if err := maskBootID(); err != nil {
		return err
	}
	if _, err := os.Lstat(newRoot + "/tmp"); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(newRoot+"/tmp", 0o1777); err != nil {
			return fmt.Errorf("create /tmp: %w", err)
		}
		if err := unix.Mount("tmpfs", newRoot+"/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
			return fmt.Errorf("mount /tmp: %w", err)
		}
	}
	target := newRoot + GuestPath
	if err := ensureFile(target); err != nil {
		return err
	}
	if err := unix.MoveMount(guestFD, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach guest binary at %s: %w", GuestPath, err)
	}
	return nil
}

// sysVisible are the parts of sysfs a sandbox sees: the CPU and NUMA
// topology (glibc's sysconf, runtimes sizing thread pools) and the network
// interfaces of its own network namespace (class/net links into
// devices/virtual/net). Everything else — firmware and ACPI tables, DMI
// (vendor, product, serial numbers), the hypervisor's uuid, block devices,
// buses, the PCI and platform device trees, kernel modules — names the host
// or its hardware and is left out. An allowlist, so what a newer kernel adds
// to sysfs stays hidden until someone decides it may be seen.
var sysVisible = []string{"devices/system/cpu", "devices/system/node", "devices/virtual/net", "class/net"}

// setupSys mounts sysfs on a staging directory, binds the sysVisible parts
// of it into a tmpfs at /sys and makes that read-only. The sandbox cannot
// undo it: its seccomp filter refuses mount and umount. sysfs is only
// mountable when the kernel lets this user namespace see it; without it /sys
// stays the rootfs's own directory.
func setupSys() error {
	staging := stageDir + "/sys"
	if err := os.Mkdir(staging, 0o700); err != nil {
		return fmt.Errorf("staging /sys: %w", err)
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("sysfs", staging, "sysfs", unix.MS_RDONLY|flags, ""); err != nil {
		return nil
	}
	defer unix.Unmount(staging, unix.MNT_DETACH)
	sys := newRoot + "/sys"
	if err := unix.Mount("tmpfs", sys, "tmpfs", flags, "mode=755,size=16k"); err != nil {
		return fmt.Errorf("mount /sys: %w", err)
	}
	for _, rel := range sysVisible {
		src := staging + "/" + rel
		if _, err := os.Lstat(src); err != nil {
			continue // not in this kernel
		}
		dst := sys + "/" + rel
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return fmt.Errorf("create /sys/%s: %w", rel, err)
		}
		if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind /sys/%s: %w", rel, err)
		}
		if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|flags, ""); err != nil {
			return fmt.Errorf("make /sys/%s read-only: %w", rel, err)
		}
	}
	if err := unix.Mount("", sys, "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, ""); err != nil {
		return fmt.Errorf("make /sys read-only: %w", err)
	}
	return nil
}

// maskBootID binds a file holding a fresh UUID over
// /proc/sys/kernel/random/boot_id: the node's boot id is the same for every
// sandbox on it until the node reboots, so two sandboxes comparing theirs
// would learn they share a node. (/proc/cpuinfo stays: it names a CPU model
// shared by a fleet, not a host, and programs read its flags.)
func maskBootID() error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("boot id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	id := fmt.Sprintf("%x-%x-%x-%x-%x\n", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	src := stageDir + "/boot_id"
	if err := os.WriteFile(src, []byte(id), 0o444); err != nil {
		return fmt.Errorf("boot id: %w", err)
	}
	dst := newRoot + "/proc/sys/kernel/random/boot_id"
	if _, err := os.Lstat(dst); err != nil {
		return nil // a kernel without it
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mask %s: %w", dst, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", dst, err)
	}
	return nil
}

// ensureDir makes newRoot/name a real directory. The rootfs is written by the
// sandbox, so a symlink there (which would redirect a mount before pivot_root)
// is refused rather than followed.
func ensureDir(name string) error {
	p := filepath.Join(newRoot, name)
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(p, 0o755); err != nil {
			return fmt.Errorf("create /%s: %w", name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("rootfs /%s: %w", name, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("rootfs /%s is a %v, not a directory: refusing to mount over it", name, fi.Mode().Type())
	}
	return nil
}

// ensureFile makes p an existing regular file (a bind-mount target) without
// following a symlink.
func ensureFile(p string) error {
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o755)
	if err != nil {
		return fmt.Errorf("create mount target %s: %w", p, err)
	}
	defer unix.Close(fd)
	var sb unix.Stat_t
	if err := unix.Fstat(fd, &sb); err != nil || sb.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("mount target %s is not a regular file", p)
	}
	return nil
}

// hostDevices are bound from the host's /dev into the sandbox's.
var hostDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

func setupDev() error {
	dev := newRoot + "/dev"
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=64k"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, name := range hostDevices {
		if err := ensureFile(dev + "/" + name); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+name, dev+"/"+name, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", name, err)
		}
	}
	for _, dir := range []string{"pts", "shm"} {
		if err := os.Mkdir(dev+"/"+dir, 0o755); err != nil {
			return fmt.Errorf("create /dev/%s: %w", dir, err)
		}
	}
	if err := unix.Mount("devpts", dev+"/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5"); err != nil {
		return fmt.Errorf("mount /dev/pts: %w", err)
	}
	if err := unix.Mount("shm", dev+"/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	links := [][2]string{{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}}
	for _, l := range links {
		if err := os.Symlink(l[0], dev+"/"+l[1]); err != nil {
			return fmt.Errorf("create /dev/%s: %w", l[1], err)
		}
	}
	return nil
}

// pivot makes newRoot the root and detaches the old one (pivot_root(".", ".")
// stacks the old root on the new one; unmounting "." then removes it).
func pivot() error {
	if err := unix.Chdir(newRoot); err != nil {
		return fmt.Errorf("chdir to new root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	return nil
}
