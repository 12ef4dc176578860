package e2e

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is one process of the scale-out cluster, in a process group of its
// own (so cleanup can take what it left behind).
type proc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
}

// startProc starts bin.space with args, its stderr (and stdout unless
// stdout is given) going to log with the process's name in front.
func startProc(tb testing.TB, name string, log io.Writer, env []string, stdout io.Writer, argv ...string) *proc {
	tb.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	w := &prefixWriter{prefix: "[" + name + "] ", w: log}
	cmd.Stderr = w
	cmd.Stdout = w
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill9 kills the process itself (not its group) with SIGKILL, like a
// crash, and waits for it.
func (p *proc) kill9() {
	if !p.alive() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// stop asks the process to stop (SIGTERM) and kills it after timeout; it
// reports whether the process stopped by itself.
func (p *proc) stop(timeout time.Duration) bool {
	if !p.alive() {
		return true
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return true
	case <-time.After(timeout):
		p.kill9()
		return false
	}
}

// killGroup kills whatever is left in the process's group.
func (p *proc) killGroup() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.kill9()
}

// prefixWriter writes each chunk (a log line, mostly) with a prefix.
type prefixWriter struct {
	prefix string
	w      io.Writer
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if _, err := p.w.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// linesOf sends r's lines on a channel, closed at EOF; lines after the
// first few are dropped unless read.
func linesOf(r io.Reader, tee io.Writer) <-chan string {
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			tee.Write([]byte(sc.Text() + "\n"))
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	return lines
}

// leftovers lists what is still mounted, running, attached as a loop
// device or present as a cgroup under dir; execIDs are the executions
// whose cgroups must be gone.
func leftovers(dir string, execIDs []string) []string {
	var out []string
	for _, m := range mountsUnder(dir) {
		out = append(out, "mount "+m)
	}
	for _, p := range processesMentioning(dir) {
		out = append(out, "process "+p)
	}
	for _, l := range loopDevicesOf(dir) {
		out = append(out, "loop device "+l)
	}
	for _, id := range execIDs {
		groups, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "space", id))
		more, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "space", id))
		own, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "space."+id)) // its own cpu group (v1)
		for _, g := range slices.Concat(groups, more, own) {
			out = append(out, "cgroup "+g)
		}
	}
	return out
}

// loopDevicesOf lists the loop devices whose backing file is under dir.
func loopDevicesOf(dir string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), dir) {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return out
}

// forceClean removes what leftovers found, so one failed run does not
// break the next: processes, then mounts (deepest first), then loop
// devices.
func forceClean(dir string) {
	for _, p := range processesMentioning(dir) {
		var pid int
		for _, c := range p {
			if c < '0' || c > '9' {
				break
			}
			pid = pid*10 + int(c-'0')
		}
		if pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	time.Sleep(200 * time.Millisecond)
	mounts := mountsUnder(dir)
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
	for _, l := range loopDevicesOf(dir) {
		_ = exec.Command("losetup", "-d", l).Run()
	}
}
