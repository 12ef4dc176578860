package benchbase

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/benchstat"
)

// DefaultBusybox is where Debian's busybox-static package installs busybox.
const DefaultBusybox = "/bin/busybox"

// spawnTimeout bounds one namespaced spawn of `true`.
const spawnTimeout = 30 * time.Second

// checkStaticELF reports an error unless path is an executable ELF file that
// needs no dynamic loader: it is the only file of the chroot and of the
// guest's initramfs.
func checkStaticELF(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; the baselines need a static busybox (apt-get install busybox-static)", path)
		}
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%s is not an executable (ELF type %s)", path, f.Type)
	}
	return nil
}

// makeRoot fills dir with the spawn's root: bin/busybox (a copy of busybox)
// and bin/true, a link to it.
func makeRoot(dir, busybox string) error {
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	if err := copyFile(busybox, filepath.Join(bin, "busybox"), 0o755); err != nil {
		return err
	}
	return os.Symlink("busybox", filepath.Join(bin, "true"))
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return out.Close()
}

// spawnArgs is the command of one spawn: unshare into new PID (forking, so
// the child is PID 1 of its namespace), mount, UTS, IPC and network
// namespaces, then chroot into root and run /bin/true.
func spawnArgs(unshare, chroot, root string) []string {
	return []string{unshare, "--fork", "--pid", "--mount", "--uts", "--ipc", "--net", chroot, root, "/bin/true"}
}

// groupCommand returns a command run in a process group of its own, which
// is killed whole when ctx ends, and dies with this process.
func groupCommand(ctx context.Context, argv []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true, Pdeathsig: unix.SIGKILL}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	return cmd
}

// killGroup kills the process group of a started command.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// spawnBaseline times count spawns of `true` in fresh namespaces and a chroot whose
// root is made under tmp.
func spawnBaseline(ctx context.Context, tools Tools, tmp string, count int) (benchstat.Summary, error) {
	root := filepath.Join(tmp, "spawn-root")
	if err := makeRoot(root, tools.Busybox); err != nil {
		return benchstat.Summary{}, fmt.Errorf("make the chroot: %w", err)
	}
	argv := spawnArgs(tools.Unshare, tools.Chroot, root)
	var durations []time.Duration
	var wall time.Duration
	for i := range count {
		d, err := spawnOnce(ctx, argv)
		if err != nil {
			return benchstat.Summary{}, fmt.Errorf("spawn %d of %d: %w", i+1, count, err)
		}
		durations = append(durations, d)
		wall += d
	}
	return benchstat.Summarize(durations, wall, 0), nil
}

// spawnOnce runs argv to its end and returns how long it took.
func spawnOnce(ctx context.Context, argv []string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, spawnTimeout)
	defer cancel()
	cmd := groupCommand(ctx, argv)
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	// No process is left: the namespace's PID 1 exiting ended it.
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), errors.Join(err, ctx.Err()), printable(out.String()))
	}
	return d, nil
}
