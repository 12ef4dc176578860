package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// This file exports what a baseline measurement (internal/benchbase) needs
// to start QEMU the way the driver does, without the driver: the machine and
// accelerator choices, the arguments that select them, and the QMP client.
// Nothing here is on a sandbox's path.

// Machine returns the QEMU machine type of the driver's new VMs:
// Config.Machine resolved against the kernel (MachineQ35 or MachineMicrovm).
func (d *Driver) Machine() string { return d.current().machine }

// Accel returns the accelerator of the driver's VMs (AccelKVM or AccelTCG),
// choosing it the way Start does: Config.Accel if set, else the probe's
// result cached in Config.CacheDir for this host boot, else a probe boot of
// the current kernel (Kernel) with initrd, whose /init must print
// guestinit.StartedMarker on the serial console and power off.
func (d *Driver) Accel(ctx context.Context, initrd string) string {
	return d.chooseAccel(ctx, d.Kernel().Vmlinuz, initrd)
}

// MachineArgs returns the QEMU arguments that select the machine, the
// accelerator and the CPU model of the driver's VMs (-M, -accel, -cpu), and
// the start of their kernel command line (console, panic, the machine's own
// parameters), to which the caller appends " -- " and its init's arguments.
// The driver's devices, jail and sockets are not included.
func MachineArgs(machine, accel string) (args []string, cmdline string) {
	m := layoutFor(machine, false)
	args = append([]string{"-M", m.machine}, accelArgs(accel)...)
	return args, kernelBaseCmdline(m)
}

// QMP is a session on a QEMU's QMP socket, for programs that start QEMU
// themselves: the greeting read and capabilities negotiated. Events read
// while waiting for answers are dropped. Not safe for concurrent use.
type QMP struct {
	s *qmpSession
}

// DialQMP connects to the QMP socket at path, retrying while it does not
// exist yet until ctx ends, and negotiates capabilities. Each command of the
// session gets its own deadline; cancelling ctx ends every later command.
func DialQMP(ctx context.Context, path string) (*QMP, error) {
	var uc *net.UnixConn
	for {
		var dialer net.Dialer
		c, err := dialer.DialContext(ctx, "unix", path)
		if err == nil {
			uc = c.(*net.UnixConn)
			break
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("qmp: connect %s: %w", path, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	s := &qmpSession{ctx: ctx, uc: uc}
	s.c = &qmpConn{rw: uc, r: newReader(uc)}
	s.stop = context.AfterFunc(ctx, func() { uc.SetDeadline(time.Now()) })
	uc.SetDeadline(time.Now().Add(qmpStepTimeout))
	if err := s.c.readGreeting(); err != nil {
		s.Close()
		return nil, err
	}
	if _, err := s.c.execute("qmp_capabilities"); err != nil {
		s.Close()
		return nil, err
	}
	return &QMP{s: s}, nil
}

// Execute runs cmd with args (nil for none), passing fds along on the
// socket (SCM_RIGHTS, as getfd wants), and returns QEMU's answer.
func (q *QMP) Execute(cmd string, args any, fds ...int) (json.RawMessage, error) {
	return q.s.run(cmd, args, fds...)
}

// Status returns the VM's run state (query-status): "running", "paused",
// "inmigrate", ...
func (q *QMP) Status() (string, error) { return q.s.status() }

// WaitMigration waits until an outgoing migration has completed, or returns
// the error QEMU gives when it failed or the timeout passed.
func (q *QMP) WaitMigration(timeout time.Duration) error {
	_, err := q.s.waitMigration(timeout)
	return err
}

// Close ends the session.
func (q *QMP) Close() error { return q.s.Close() }
