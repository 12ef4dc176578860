package benchbase

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/spacesandbox/space/internal/driver/vm"
)

// guestMemoryMiB is the guest's RAM: the size the vm runtime's documented
// driver benchmarks use (docs/PERFORMANCE.md).
const guestMemoryMiB = 256

// guest is how the baseline guest boots: the vm runtime's kernel, machine
// type and accelerator, the baseline's own initramfs, one vCPU.
type guest struct {
	qemu    string
	kernel  string
	release string // the kernel's release, for the report
	initrd  string
	machine string // vm.MachineQ35 or vm.MachineMicrovm
	accel   string // vm.AccelKVM or vm.AccelTCG
}

// args is QEMU's command line: the guest's init runs in mode; with qmp set,
// QEMU serves QMP on that unix socket path; with incoming set it loads a
// migration stream from descriptor 3 and stays paused (-S) once loaded, as
// the vm runtime restores. The serial console is QEMU's standard output.
func (g *guest) args(mode, qmp string, incoming bool) []string {
	machine, cmdline := vm.MachineArgs(g.machine, g.accel)
	argv := append([]string{g.qemu}, machine...)
	argv = append(argv,
		"-m", strconv.Itoa(guestMemoryMiB), "-smp", "1",
		"-display", "none", "-nodefaults", "-no-user-config", "-no-reboot",
		"-kernel", g.kernel, "-initrd", g.initrd,
		"-append", cmdline+" -- "+mode,
		"-serial", "stdio",
	)
	if qmp != "" {
		argv = append(argv, "-qmp", "unix:"+qmp+",server=on,wait=off")
	}
	if incoming {
		argv = append(argv, "-S", "-incoming", "fd:3")
	}
	return argv
}

// qemuProcess is a running QEMU with its console being read.
type qemuProcess struct {
	cmd    *exec.Cmd
	con    *console
	stderr tailBuffer    // QEMU's standard error; read only after exited
	exited chan struct{} // closed once QEMU has exited and been reaped
	err    error         // Wait's result; read only after exited
}

// startQEMU starts argv in a process group of its own, with incoming (if
// not nil) as descriptor 3, and reads its console until it exits.
func startQEMU(argv []string, incoming *os.File) (*qemuProcess, error) {
	// Not tied to a context: stop ends it, on every path.
	cmd := groupCommand(context.Background(), argv)
	p := &qemuProcess{cmd: cmd, con: newConsole(), exited: make(chan struct{})}
	cmd.Stderr = &p.stderr
	if incoming != nil {
		cmd.ExtraFiles = []*os.File{incoming}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	go func() {
		defer close(p.exited)
		p.con.run(out)
		p.err = cmd.Wait()
	}()
	return p, nil
}

// stop kills QEMU's process group and waits until it is reaped.
func (p *qemuProcess) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = killGroup(p.cmd)
	<-p.exited
}

// wait waits until ch is closed, failing when ctx ends, timeout passes or
// QEMU exits first; the error then says what QEMU and the guest printed.
func (p *qemuProcess) wait(ctx context.Context, ch <-chan struct{}, timeout time.Duration, what string) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		p.stop()
		return fmt.Errorf("wait for %s: %w", what, ctx.Err())
	case <-t.C:
		p.stop()
		return fmt.Errorf("no %s within %s%s", what, timeout, p.lastWords())
	case <-p.exited:
		select {
		case <-ch: // seen just before the end
			return nil
		default:
		}
		return fmt.Errorf("QEMU exited (%v) before %s%s", p.err, what, p.lastWords())
	}
}

// lastWords describes QEMU's standard error and the console's end, once
// QEMU has exited.
func (p *qemuProcess) lastWords() string {
	<-p.exited
	return fmt.Sprintf(" (QEMU said: %q; console: %q)", printable(p.stderr.String()), p.con.output())
}

// context returns a context that ends with ctx, after timeout, or when
// QEMU exits: for waiting on its QMP socket.
func (p *qemuProcess) context(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("QEMU did not answer on QMP within %s", timeout))
	go func() {
		select {
		case <-p.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// exitedEarly returns an error with QEMU's last words if QEMU has exited.
func (p *qemuProcess) exitedEarly() error {
	select {
	case <-p.exited:
		return errors.New("QEMU exited" + p.lastWords())
	default:
		return nil
	}
}
