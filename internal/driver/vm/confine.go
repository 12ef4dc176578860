package vm

// Confinement of QEMU. Unless Config.Unconfined is set, QEMU is not started
// directly: qemuCommand returns a command that re-executes this binary as the
// jail helper (argv[0] JailHelper) in new mount, network, IPC and UTS
// namespaces. The helper, still root:
//
//  1. enters the VMM's cgroup, which the driver created (cgroup.go), so
//     that QEMU is bounded from its first allocation;
//  2. binds QEMU's server sockets (the chardev, QMP and stream netdev sockets
//     qemuArgs names by path) itself, in the execution's directory, and
//     rewrites QEMU's arguments to pass them as descriptors (fd=N,
//     addr.type=fd): QEMU never needs to create a file;
//  3. builds the jail: an empty read-only tmpfs as the root, with read-only
//     bind mounts of /usr (QEMU, its libraries, firmware and modules), the
//     host's /bin, /sbin and /lib* (symlinks into /usr on merged-/usr hosts),
//     /etc/ld.so.cache, the files QEMU's arguments name (kernel, initramfs),
//     the device nodes it needs (/dev/null, /dev/zero, /dev/random,
//     /dev/urandom, /dev/kvm with KVM, /dev/vhost-vsock with vsock) and the
//     execution's directory at its host path, read-only but for disk.img;
//     then pivot_root into it and detaches the host's tree;
//  4. drops to the execution's own uid and gid (no supplementary groups but
//     the owner group of a device it needs), sets no_new_privs and a zero
//     core-size limit, and execs QEMU, which keeps the pid the driver
//     recorded and adds its own seccomp filter (-sandbox).
//
// The directory the driver keeps the execution's state in is root's; QEMU
// can only traverse it (0710, group = the VM's gid), read guest.json (0640)
// and read and write disk.img (0660). It owns no file there, so it cannot
// change a mode, and it cannot create, replace or remove any file there, so
// nothing root later opens by path (state.json, the logs, the sockets, the
// disk a checkpoint clones) can be swapped for a symlink by a compromised
// QEMU. There is no /proc, /sys, /tmp, /home, /root or other /etc in the
// jail, and no other execution's directory.
//
// The helper is dispatched from a package init function rather than a verb
// in main, so every binary that runs the driver (space node-manager, this
// package's tests) can confine QEMU without wiring anything; it is the
// pattern of moby's reexec package.
//
// Every execution gets a uid of its own from [Config.UIDBase,
// Config.UIDBase+Config.UIDs): no two QEMUs share one, so one cannot signal,
// ptrace or read the files of another. A uid is claimed by a file
// StateDir/uids/<uid> naming the execution, taken under a lock shared with
// other processes over the same state directory. A claim is released when
// the execution's directory is gone (Cleanup removes it after QEMU has
// exited) and no process runs with the uid; the next allocation removes such
// stale claims. A uid held by any live process is never handed out, whatever
// the claims say.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/cgroup"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/reexec"
)

// JailHelper is argv[0] of the jail helper: the name under which the
// node-manager binary runs JailMain (reexec.Run).
const JailHelper = "space-vm-jail"

// Defaults of Config.UIDBase and Config.UIDs. The range lies far above the
// ns runtime's default ranges (1000000 up, 65536 uids per sandbox) and the
// ranges /etc/subuid usually hands out.
const (
	defaultUIDBase = 900_000_000
	defaultUIDs    = 65536
)

// uidClaimsDir is the directory under StateDir of the uid claims.
const uidClaimsDir = "uids"

// jailSystemPaths are the host's system directories the jail shows
// read-only: a symlink is copied as a symlink, a directory is bind-mounted.
var jailSystemPaths = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// jailBaseDevices are the device nodes every QEMU gets.
var jailBaseDevices = []string{"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"}

// jailSpec is what the driver tells the jail helper (as JSON in argv[1]).
type jailSpec struct {
	// Root is an empty directory to mount the jail's tmpfs on.
	Root string `json:"root"`
	// Dir is the execution's directory: QEMU's working directory, shown
	// read-only at the same path, and where the sockets are bound.
	Dir string `json:"dir"`
	// Log names the file in Dir that takes the helper's and QEMU's
	// standard output and error.
	Log string `json:"log"`
	// Writable names files in Dir shown read-write (the disk).
	Writable []string `json:"writable"`
	// Files are host files shown read-only at the same path.
	Files []string `json:"files"`
	// Devices are device nodes shown at the same path.
	Devices []string `json:"devices"`
	// QEMU is the binary (a path inside the jail) and Args its arguments,
	// with server sockets still given by path.
	QEMU string   `json:"qemu"`
	Args []string `json:"args"`
	// UID and GID are the ids QEMU runs as; Groups its supplementary groups.
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups"`
	// Cgroup are the directories of the VMM's cgroup (one per hierarchy),
	// which the helper enters before anything else.
	Cgroup []string `json:"cgroup"`
}

// JailMain runs the jail helper on its one argument, the JSON jail
// specification; it returns only by exiting.
func JailMain(args []string) {
	// No_new_privs is a per-thread attribute: set it on the thread that
	// execs QEMU.
	runtime.LockOSThread()
	err := errors.New("want one argument, the jail specification")
	if len(args) == 1 {
		err = runJail(args[0])
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", JailHelper, err)
	os.Exit(126)
}

func runJail(arg string) error {
	var s jailSpec
	if err := json.Unmarshal([]byte(arg), &s); err != nil {
		return fmt.Errorf("decode the jail specification: %w", err)
	}
	// Errors go to the log from here on; until then to the inherited
	// standard error.
	if !filepath.IsAbs(s.Dir) || filepath.Clean(s.Dir) != s.Dir || !plainName(s.Log) {
		return fmt.Errorf("directory %q or log %q is not usable", s.Dir, s.Log)
	}
	if err := os.Chdir(s.Dir); err != nil {
		return err
	}
	if err := redirectOutput(s.Log); err != nil {
		return err
	}
	if err := s.validate(); err != nil {
		return err
	}
	// In the group before QEMU, or this helper, allocates what it bounds.
	if err := cgroup.Enter(s.Cgroup); err != nil {
		return fmt.Errorf("enter the VMM's cgroup: %w", err)
	}
	args, err := preBindSockets(s.Args, listenUnix)
	if err != nil {
		return err
	}
	if err := s.mount(); err != nil {
		return fmt.Errorf("build the jail: %w", err)
	}
	if err := dropPrivileges(s.UID, s.GID, s.Groups); err != nil {
		return err
	}
	argv := append([]string{s.QEMU}, args...)
	if err := unix.Exec(s.QEMU, argv, []string{}); err != nil {
		return fmt.Errorf("exec %s: %w", s.QEMU, err)
	}
	return nil
}

func (s *jailSpec) validate() error {
	paths := append([]string{s.Root, s.Dir, s.QEMU}, s.Files...)
	paths = append(paths, s.Cgroup...)
	for _, p := range append(paths, s.Devices...) {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return fmt.Errorf("jail path %q is not absolute and clean", p)
		}
	}
	for _, name := range append([]string{s.Log}, s.Writable...) {
		if !plainName(name) {
			return fmt.Errorf("writable file %q is not a plain name", name)
		}
	}
	if s.UID == 0 || s.GID == 0 || len(s.Args) == 0 {
		return fmt.Errorf("jail for uid %d gid %d with %d arguments: want unprivileged ids and a command line", s.UID, s.GID, len(s.Args))
	}
	if len(s.Cgroup) == 0 {
		return errors.New("jail without a cgroup: QEMU runs only in its own group")
	}
	return nil
}

// redirectOutput makes the file name in the working directory (root's, so
// not followed if a symlink) the standard output and error, appending.
func redirectOutput(name string) error {
	fd, err := unix.Open(name, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	defer unix.Close(fd)
	for _, to := range []int{1, 2} {
		if err := unix.Dup3(fd, to, 0); err != nil {
			return fmt.Errorf("redirect to %s: %w", name, err)
		}
	}
	return nil
}

// plainName reports whether name is one path element.
func plainName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsRune(name, '/')
}

// preBindSockets returns args with every server socket QEMU would create
// by path replaced by a descriptor that listen returned for that path:
// "-chardev socket,...,path=NAME,server=on,..." becomes "...,fd=N,...",
// "-qmp unix:NAME,server=on,..." becomes a socket chardev on fd N and a
// control monitor on it, and "-netdev stream,...,server=on,addr.type=unix,
// addr.path=NAME" becomes "...,addr.type=fd,addr.str=N" (QEMU listens on a
// descriptor it is given). NAME must be a plain name (relative to QEMU's
// working directory). Other socket forms QEMU would open itself, and every
// other network backend (the jail has no network), are refused, so a change
// of qemuArgs the jail cannot serve fails loudly.
func preBindSockets(args []string, listen func(name string) (int, error)) ([]string, error) {
	out := make([]string, 0, len(args)+2)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if (a == "-chardev" || a == "-qmp") && i+1 < len(args) {
			i++
			repl, err := rewriteSocketArg(a, args[i], listen)
			if err != nil {
				return nil, err
			}
			out = append(out, repl...)
			continue
		}
		if a == "-netdev" && i+1 < len(args) {
			i++
			repl, err := rewriteNetdevArg(args[i], listen)
			if err != nil {
				return nil, err
			}
			out = append(out, a, repl)
			continue
		}
		if a == "-netdev" || a == "-nic" || a == "-net" {
			return nil, fmt.Errorf("QEMU argument %q: only -netdev stream on a pre-bound unix socket is supported in the jail", a)
		}
		if strings.Contains(a, "unix:") {
			return nil, fmt.Errorf("QEMU argument %q opens a unix socket the jail cannot pre-bind", a)
		}
		out = append(out, a)
	}
	return out, nil
}

func rewriteSocketArg(flag, val string, listen func(string) (int, error)) ([]string, error) {
	if flag == "-qmp" {
		rest, ok := strings.CutPrefix(val, "unix:")
		if !ok {
			return nil, fmt.Errorf("-qmp %q: only unix:NAME,server=on is supported in the jail", val)
		}
		name, opts, _ := strings.Cut(rest, ",")
		if !hasOpt(opts, "server", "on") {
			return nil, fmt.Errorf("-qmp %q: not a server socket", val)
		}
		fd, err := listenName(name, listen)
		if err != nil {
			return nil, err
		}
		chardev := "socket,id=space-qmp,fd=" + strconv.Itoa(fd)
		if opts != "" {
			chardev += "," + opts
		}
		return []string{"-chardev", chardev, "-mon", "chardev=space-qmp,mode=control"}, nil
	}
	opts := strings.Split(val, ",")
	if opts[0] != "socket" {
		if strings.Contains(val, "unix:") {
			return nil, fmt.Errorf("-chardev %q opens a unix socket the jail cannot pre-bind", val)
		}
		return []string{flag, val}, nil
	}
	found := false
	for k, o := range opts {
		name, ok := strings.CutPrefix(o, "path=")
		if !ok {
			continue
		}
		if !hasOpt(strings.Join(opts[1:], ","), "server", "on") {
			return nil, fmt.Errorf("-chardev %q: a client socket cannot be pre-bound", val)
		}
		fd, err := listenName(name, listen)
		if err != nil {
			return nil, err
		}
		opts[k] = "fd=" + strconv.Itoa(fd)
		found = true
	}
	if !found && !strings.Contains(val, ",fd=") {
		return nil, fmt.Errorf("-chardev %q: only path= server sockets are supported in the jail", val)
	}
	return []string{flag, strings.Join(opts, ",")}, nil
}

// rewriteNetdevArg rewrites a stream netdev's unix server socket into a
// pre-bound descriptor: "stream,id=X,server=on,addr.type=unix,addr.path=NAME"
// becomes "stream,id=X,server=on,addr.type=fd,addr.str=N". One already given
// as a descriptor passes. Anything else is refused: a client socket, an
// abstract or inet address, and every other backend (user, tap, socket,
// bridge...: the jail's network namespace is empty, and QEMU may create no
// file).
func rewriteNetdevArg(val string, listen func(string) (int, error)) (string, error) {
	opts := strings.Split(val, ",")
	if opts[0] != "stream" {
		return "", fmt.Errorf("-netdev %q: only stream netdevs are supported in the jail", val)
	}
	rest := strings.Join(opts[1:], ",")
	if !hasOpt(rest, "server", "on") {
		return "", fmt.Errorf("-netdev %q: a client socket cannot be pre-bound", val)
	}
	typeAt, pathAt := -1, -1
	for k, o := range opts[1:] {
		key, v, _ := strings.Cut(o, "=")
		switch {
		case key == "addr.type" && typeAt < 0 && (v == "unix" || v == "fd"):
			typeAt = k + 1
		case key == "addr.path" && pathAt < 0:
			pathAt = k + 1
		case key == "addr.str" && v != "" && strings.Trim(v, "0123456789") == "":
		case strings.HasPrefix(key, "addr.") || key == "addr":
			return "", fmt.Errorf("-netdev %q: address option %q is not supported in the jail", val, o)
		}
	}
	switch {
	case typeAt < 0:
		return "", fmt.Errorf("-netdev %q: want addr.type=unix (or fd) in the jail", val)
	case opts[typeAt] == "addr.type=fd":
		if pathAt >= 0 || !strings.Contains(val, ",addr.str=") {
			return "", fmt.Errorf("-netdev %q: a descriptor address takes addr.str=N only", val)
		}
		return val, nil
	case pathAt < 0 || strings.Contains(val, ",addr.str="):
		return "", fmt.Errorf("-netdev %q: a unix address takes addr.path=NAME only", val)
	}
	fd, err := listenName(strings.TrimPrefix(opts[pathAt], "addr.path="), listen)
	if err != nil {
		return "", err
	}
	opts[typeAt] = "addr.type=fd"
	opts[pathAt] = "addr.str=" + strconv.Itoa(fd)
	return strings.Join(opts, ","), nil
}

// hasOpt reports whether the QEMU option list opts sets key to val ("key"
// alone means on).
func hasOpt(opts, key, val string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == key+"="+val || val == "on" && o == key {
			return true
		}
	}
	return false
}

func listenName(name string, listen func(string) (int, error)) (int, error) {
	if !plainName(name) {
		return 0, fmt.Errorf("QEMU socket %q: want a name in the execution's directory", name)
	}
	return listen(name)
}

// listenUnix binds a listening unix socket at name (in the working
// directory) that a child inherits, replacing a stale one.
func listenUnix(name string) (int, error) {
	if err := unix.Unlink(name); err != nil && !errors.Is(err, unix.ENOENT) {
		return 0, fmt.Errorf("remove stale socket %s: %w", name, err)
	}
	// Inheritable on purpose: QEMU gets it through exec.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return 0, fmt.Errorf("socket %s: %w", name, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: name}); err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("bind %s: %w", name, err)
	}
	if err := unix.Chmod(name, 0o600); err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("chmod %s: %w", name, err)
	}
	if err := unix.Listen(fd, 16); err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("listen %s: %w", name, err)
	}
	return fd, nil
}

// mount builds the jail at s.Root and makes it the root. The helper runs in
// a mount namespace of its own (Unshareflags), so nothing of this reaches the
// host.
func (s *jailSpec) mount() error {
	const (
		ro     = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV
		roData = ro | unix.MS_NOEXEC
	)
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("space-vm-jail", s.Root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=1024"); err != nil {
		return fmt.Errorf("mount the jail's tmpfs on %s: %w", s.Root, err)
	}
	for _, p := range jailSystemPaths {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(s.Root, p)); err != nil {
				return err
			}
		case fi.IsDir():
			if err := s.bind(p, p, true, ro); err != nil {
				return err
			}
		}
	}
	if _, err := os.Stat("/etc/ld.so.cache"); err == nil {
		if err := s.bind("/etc/ld.so.cache", "/etc/ld.so.cache", false, roData); err != nil {
			return err
		}
	}
	for _, p := range s.Files {
		if underSystemPath(p) {
			continue
		}
		if err := s.bind(p, p, false, roData); err != nil {
			return err
		}
	}
	for _, p := range s.Devices {
		// A device node stays writable on a read-only mount.
		if err := s.bind(p, p, false, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC); err != nil {
			return err
		}
	}
	if err := s.bind(s.Dir, s.Dir, true, roData); err != nil {
		return err
	}
	for _, name := range s.Writable {
		p := filepath.Join(s.Dir, name)
		if err := s.bind(p, p, false, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC); err != nil {
			return err
		}
	}
	return s.pivot()
}

// underSystemPath reports whether p is shown through one of
// jailSystemPaths already.
func underSystemPath(p string) bool {
	for _, sys := range jailSystemPaths {
		if p == sys || strings.HasPrefix(p, sys+"/") {
			return true
		}
	}
	return false
}

// bind shows the host's src at dst inside the jail with flags (a
// combination of MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC).
func (s *jailSpec) bind(src, dst string, dir bool, flags uintptr) error {
	if underSystemPath(dst) && !slices.Contains(jailSystemPaths, dst) {
		return fmt.Errorf("jail mount point %s lies in a system directory", dst)
	}
	target := filepath.Join(s.Root, dst)
	if dir {
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY|unix.O_NOFOLLOW, 0o444)
		if err != nil {
			return err
		}
		f.Close()
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|flags, ""); err != nil {
		return fmt.Errorf("restrict the bind of %s: %w", src, err)
	}
	return nil
}

// pivot makes the jail the root, detaches the host's tree, makes the jail's
// root read-only and enters QEMU's working directory.
func (s *jailSpec) pivot() error {
	if err := unix.Chdir(s.Root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("make the jail's root read-only: %w", err)
	}
	return unix.Chdir(s.Dir)
}

// QEMUMaxFiles is the RLIMIT_NOFILE (soft and hard) of a confined QEMU: its
// disks, sockets and event fds take tens, and a guest that makes it open
// more exhausts its own QEMU's table, not the node's.
const QEMUMaxFiles = 4096

// dropPrivileges switches every thread to uid and gid with only groups as
// supplementary groups (which clears all capabilities), and sets
// no_new_privs, a zero core-size limit (a QEMU core holds guest memory) and
// an open-file limit of QEMUMaxFiles on this thread, the one that execs.
func dropPrivileges(uid, gid uint32, groups []uint32) error {
	gs := make([]int, len(groups))
	for i, g := range groups {
		gs[i] = int(g)
	}
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return fmt.Errorf("core-size limit: %w", err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: QEMUMaxFiles, Max: QEMUMaxFiles}); err != nil {
		return fmt.Errorf("open-file limit %d: %w", QEMUMaxFiles, err)
	}
	if err := syscall.Setgroups(gs); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(int(gid), int(gid), int(gid)); err != nil {
		return fmt.Errorf("setresgid %d: %w", gid, err)
	}
	if err := syscall.Setresuid(int(uid), int(uid), int(uid)); err != nil {
		return fmt.Errorf("setresuid %d: %w", uid, err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return nil
}

// confinedCommand is the jail helper's command that runs QEMU with args for
// st: it claims st's uid, creates the VMM's cgroup, opens the execution's
// files to its group, and works out what the jail must show.
func (d *Driver) confinedCommand(ctx context.Context, st *state, args []string) (*exec.Cmd, error) {
	uid, err := d.allocUID(st.ExecID)
	if err != nil {
		return nil, err
	}
	cgroupDirs, err := d.createVMMGroup(ctx, st)
	if err != nil {
		return nil, err
	}
	st.UID, st.GID = uid, uid
	dir := d.execDir(st.ExecID)
	if err := prepareExecDir(dir, uid, st.MemoryFile); err != nil {
		return nil, fmt.Errorf("hand the execution's files to uid %d: %w", uid, err)
	}
	qemu, err := filepath.EvalSymlinks(d.cfg.QEMU)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", d.cfg.QEMU, err)
	}
	files, devices := jailPaths(args, st.Accel)
	if !underSystemPath(qemu) {
		files = append(files, qemu)
	}
	for _, f := range files {
		if err := worldReadable(f); err != nil {
			return nil, err
		}
	}
	groups, err := deviceGroups(devices)
	if err != nil {
		return nil, err
	}
	writable := []string{diskFile}
	if st.MemoryFile {
		writable = append(writable, memFile)
	}
	root := filepath.Join(d.cfg.StateDir, "jail")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	spec, err := json.Marshal(jailSpec{
		Root: root, Dir: dir, Log: qemuLog, Writable: writable, Files: files, Devices: devices,
		QEMU: qemu, Args: args, UID: uid, GID: uid, Groups: groups, Cgroup: cgroupDirs,
	})
	if err != nil {
		return nil, err
	}
	cmd := reexec.Command(JailHelper, string(spec))
	cmd.Dir = dir
	// Its own session: QEMU outlives the process that started it. No host
	// network, IPC or hostname; the mount namespace is set up by the helper.
	cmd.SysProcAttr = &unix.SysProcAttr{
		Setsid:       true,
		Unshareflags: unix.CLONE_NEWNS | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
	}
	return cmd, nil
}

// prepareExecDir lets the VM's group use the execution's directory without
// owning anything in it: search only on the directory, read and write on the
// disk (and the RAM file), read on the guest configuration. Owning no file, QEMU cannot change
// a mode either. Root's files (state, logs) stay 0600.
func prepareExecDir(dir string, gid uint32, ram bool) error {
	type step struct {
		path string
		mode os.FileMode
	}
	steps := []step{
		{dir, 0o710},
		{filepath.Join(dir, diskFile), 0o660},
		{filepath.Join(dir, guestConfig), 0o640},
	}
	if ram {
		steps = append(steps, step{filepath.Join(dir, memFile), 0o660})
	}
	for _, s := range steps {
		fi, err := os.Lstat(s.path)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symlink", s.path)
		}
		if err := os.Lchown(s.path, 0, int(gid)); err != nil {
			return err
		}
		if err := os.Chmod(s.path, s.mode); err != nil {
			return err
		}
	}
	return nil
}

// jailPaths returns the host files and device nodes QEMU's arguments name
// by absolute path (-kernel, -initrd, -bios, file=, filename=), plus the
// devices every QEMU needs and those its accelerator and devices open
// implicitly.
func jailPaths(args []string, accel string) (files, devices []string) {
	seen := map[string]bool{}
	add := func(p string) {
		p = filepath.Clean(p)
		if !filepath.IsAbs(p) || seen[p] {
			return
		}
		seen[p] = true
		if strings.HasPrefix(p, "/dev/") {
			devices = append(devices, p)
		} else {
			files = append(files, p)
		}
	}
	for _, p := range jailBaseDevices {
		add(p)
	}
	if accel == AccelKVM {
		add("/dev/kvm")
	}
	for i, a := range args {
		switch a {
		case "-kernel", "-initrd", "-bios":
			if i+1 < len(args) {
				add(args[i+1])
			}
			continue
		}
		if strings.Contains(a, "vhost-vsock") {
			add("/dev/vhost-vsock")
		}
		for _, o := range strings.Split(a, ",") {
			for _, key := range []string{"file=", "filename="} {
				if v, ok := strings.CutPrefix(o, key); ok {
					add(v)
				}
			}
		}
	}
	return files, devices
}

// worldReadable checks that an unprivileged QEMU can read the host file p
// (kernels and initramfs images are built 0644).
func worldReadable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%w: QEMU needs %s: %v", errdefs.ErrFailedPrecondition, p, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o004 == 0 {
		return fmt.Errorf("%w: %s (mode %v) is not a world-readable file; a confined QEMU cannot read it (chmod o+r, or Config.Unconfined)", errdefs.ErrFailedPrecondition, p, fi.Mode())
	}
	return nil
}

// deviceGroups checks that an unprivileged QEMU can open every device read
// and write, and returns the groups it needs for that (a device's group
// when the device is not open to everyone).
func deviceGroups(devices []string) ([]uint32, error) {
	var groups []uint32
	for _, p := range devices {
		var sb unix.Stat_t
		if err := unix.Stat(p, &sb); err != nil {
			return nil, fmt.Errorf("%w: QEMU needs %s: %v", errdefs.ErrFailedPrecondition, p, err)
		}
		if sb.Mode&unix.S_IFMT != unix.S_IFCHR {
			return nil, fmt.Errorf("%w: %s is not a character device", errdefs.ErrFailedPrecondition, p)
		}
		switch {
		case sb.Mode&0o006 == 0o006:
		case sb.Mode&0o060 == 0o060 && sb.Gid != 0:
			if !slices.Contains(groups, sb.Gid) {
				groups = append(groups, sb.Gid)
			}
		default:
			return nil, fmt.Errorf("%w: %s (mode %o, group %d) cannot be opened by an unprivileged QEMU", errdefs.ErrFailedPrecondition, p, sb.Mode&0o777, sb.Gid)
		}
	}
	return groups, nil
}

// uidRange returns the configured uid range.
func (d *Driver) uidRange() (base, n uint32, err error) {
	base, n = d.cfg.UIDBase, defaultUIDs
	if base == 0 {
		base = defaultUIDBase
	}
	if d.cfg.UIDs != 0 {
		if d.cfg.UIDs < 0 || d.cfg.UIDs > 1<<31 {
			return 0, 0, fmt.Errorf("%w: vm: %d uids", errdefs.ErrInvalidArgument, d.cfg.UIDs)
		}
		n = uint32(d.cfg.UIDs)
	}
	// Above the system's and users' ids, below (uid_t)-1 and 65534 doubled.
	if base < 65536 || uint64(base)+uint64(n) > 1<<32-2 {
		return 0, 0, fmt.Errorf("%w: vm: uid base %d with %d uids: want a range from 65536 up that ends below 4294967294", errdefs.ErrInvalidArgument, base, n)
	}
	return base, n, nil
}

// allocUID claims a uid for execID: the claim it already has, else the
// lowest uid of the range that no live claim names and no process holds.
func (d *Driver) allocUID(execID string) (uint32, error) {
	base, n, err := d.uidRange()
	if err != nil {
		return 0, err
	}
	dir := filepath.Join(d.cfg.StateDir, uidClaimsDir)
	unlock, err := lockDir(dir)
	if err != nil {
		return 0, err
	}
	defer unlock()
	claims, err := readUIDClaims(dir, base, n)
	if err != nil {
		return 0, err
	}
	for uid, owner := range claims {
		if owner == execID {
			return uid, nil
		}
	}
	running, err := procIDs(base, n)
	if err != nil {
		return 0, err
	}
	for uid := base; uid-base < n; uid++ {
		if running[uid] {
			continue
		}
		if owner, ok := claims[uid]; ok {
			if d.claimLive(owner) {
				continue
			}
			if err := os.Remove(claimPath(dir, uid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return 0, fmt.Errorf("vm: release stale uid claim %d: %w", uid, err)
			}
		}
		f, err := os.OpenFile(claimPath(dir, uid), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return 0, fmt.Errorf("vm: claim uid %d: %w", uid, err)
		}
		_, err = f.WriteString(execID)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(claimPath(dir, uid))
			return 0, fmt.Errorf("vm: claim uid %d: %w", uid, err)
		}
		return uid, nil
	}
	return 0, fmt.Errorf("vm: all %d uids from %d are in use by VMs or processes: %w", n, base, errdefs.ErrNoCapacity)
}

// uidInUse reports whether uid is claimed by an execution that still has
// state, or held by a live process.
func (d *Driver) uidInUse(uid uint32) (bool, error) {
	base, n, err := d.uidRange()
	if err != nil {
		return false, err
	}
	claims, err := readUIDClaims(filepath.Join(d.cfg.StateDir, uidClaimsDir), base, n)
	if err != nil {
		return false, err
	}
	if owner, ok := claims[uid]; ok && d.claimLive(owner) {
		return true, nil
	}
	running, err := procIDs(uid, 1)
	return running[uid], err
}

// claimLive reports whether the execution named by a claim still has a
// directory. A claim that names no valid execution is kept: it is not ours
// to judge.
func (d *Driver) claimLive(owner string) bool {
	if driver.ValidID(owner) != nil {
		return true
	}
	_, err := os.Lstat(d.execDir(owner))
	return !errors.Is(err, fs.ErrNotExist)
}

func claimPath(dir string, uid uint32) string {
	return filepath.Join(dir, strconv.FormatUint(uint64(uid), 10))
}

// lockDir creates dir and takes the exclusive lock dir/.lock, shared with
// other processes (and goroutines) allocating from it.
func lockDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("vm: create %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("vm: open uid lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("vm: lock %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil
}

// readUIDClaims returns the claims of uids in [base, base+n) and whom they
// name.
func readUIDClaims(dir string, base, n uint32) (map[uint32]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[uint32]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("vm: list uid claims: %w", err)
	}
	claims := make(map[uint32]string, len(entries))
	for _, e := range entries {
		v, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || uint32(v) < base || uint32(v)-base >= n {
			continue
		}
		b, err := readSmall(filepath.Join(dir, e.Name()), 256)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("vm: read uid claim %s: %w", e.Name(), err)
		}
		claims[uint32(v)] = string(b)
	}
	return claims, nil
}

// readSmall reads at most limit bytes of the regular file path, refusing
// symlinks.
func readSmall(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// procIDs returns the ids in [base, base+n) that a live process holds as a
// real, effective, saved or filesystem uid or gid. Zombies do not count:
// one left by a killed QEMU keeps its ids until the driver that started it
// reaps it, but cannot use them.
func procIDs(base, n uint32) (map[uint32]bool, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("vm: list processes: %w", err)
	}
	held := map[uint32]bool{}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue // exited meanwhile
		}
		ids, zombie, err := parseStatusIDs(b)
		if err != nil {
			return nil, fmt.Errorf("vm: /proc/%s/status: %w", e.Name(), err)
		}
		if zombie {
			continue // it can do nothing with its ids any more
		}
		for _, id := range ids {
			if id >= base && id-base < n {
				held[id] = true
			}
		}
	}
	return held, nil
}

// parseStatusIDs returns the eight ids of the Uid: and Gid: lines of a
// /proc/<pid>/status file, and whether the process is a zombie (or dead).
// (The kernel escapes a newline in the Name: line, so a process cannot
// forge a line.)
func parseStatusIDs(b []byte) (ids []uint32, zombie bool, err error) {
	lines := 0
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if state, ok := bytes.CutPrefix(line, []byte("State:")); ok {
			state = bytes.TrimSpace(state)
			zombie = bytes.HasPrefix(state, []byte("Z")) || bytes.HasPrefix(state, []byte("X"))
			continue
		}
		rest, ok := bytes.CutPrefix(line, []byte("Uid:"))
		if !ok {
			rest, ok = bytes.CutPrefix(line, []byte("Gid:"))
		}
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 4 {
			return nil, false, fmt.Errorf("id line %q: want 4 ids", line)
		}
		for _, s := range f {
			v, err := strconv.ParseUint(string(s), 10, 32)
			if err != nil {
				return nil, false, fmt.Errorf("id line %q: %w", line, err)
			}
			ids = append(ids, uint32(v))
		}
		lines++
	}
	if lines != 2 {
		return nil, false, fmt.Errorf("found %d of the Uid: and Gid: lines", lines)
	}
	return ids, zombie, nil
}
