package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/guestinit"
	"github.com/spacesandbox/space/internal/vmimage"
)

// ChannelPort is the name of the virtio-serial port of the guest channel.
const ChannelPort = "space.0"

// Start starts a VM for spec. Spec.RootFS names the template's ext4 root
// image (vmimage.RootImage), which is never written: the VM gets a clone of
// it in the execution's state directory. Spec.GuestBinary is built into the
// initramfs (cached by content hash).
//
// With template snapshots (the default, see Config.ColdBoot; never for a
// sandbox's own disk, Spec.OwnDisk, nor a guest environment, Spec.Env) the VM is
// restored from a snapshot of the same image, kernel, guest binary and size,
// booted once and saved the first time it is asked for; a snapshot that
// cannot be built or restored falls back to a cold boot, with the reason
// logged. A restored guest keeps the hostname and daemon environment of the
// template boot: the caller's Control.Init sets the sandbox's hostname,
// environment, clock and entropy, as after every start.
//
// Start returns once QEMU runs, its QMP socket accepts connections and the
// driver is connected to the guest channel; the guest daemon answers on it
// after the boot (seconds under TCG) or at once after a restore, which the
// caller waits for.
func (d *Driver) Start(ctx context.Context, spec driver.Spec) (*driver.Instance, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	fi, err := os.Lstat(spec.RootFS)
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: vm: rootfs %s must be a root disk image file (vmimage.RootImage; symlinks are refused): %v", errdefs.ErrInvalidArgument, spec.RootFS, err)
	}
	gk := d.current()
	initrd, err := vmimage.BuildInitramfs(gk.kernel, spec.GuestBinary, d.cfg.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("vm: exec %s: %w", spec.ExecID, err)
	}
	boot := bootFiles{guestKernel: gk, initrd: initrd}
	// A restored guest keeps the template boot's daemon environment: a
	// spec that gives the daemon one (Spec.Env: the failpoints a test arms
	// in the guest) boots cold to have it.
	if !d.cfg.ColdBoot && !spec.OwnDisk && len(spec.Env) == 0 {
		inst, err := d.startFromTemplate(ctx, spec, fi, boot)
		if err == nil {
			d.templateRestores.Add(1)
			return inst, nil
		}
		if ctx.Err() != nil || errors.Is(err, errdefs.ErrConflict) {
			return nil, err
		}
		d.log.Warn("template snapshot not usable: cold boot", "exec", spec.ExecID, "reason", err)
	}
	inst, err := d.coldStart(ctx, spec, boot)
	if err != nil {
		return nil, err
	}
	d.coldBoots.Add(1)
	return inst, nil
}

// coldStart boots a VM for spec.
func (d *Driver) coldStart(ctx context.Context, spec driver.Spec, boot bootFiles) (*driver.Instance, error) {
	st, err := d.register(spec, boot.kernel.Vmlinuz, boot.machine, boot.initrd)
	if err != nil {
		return nil, err
	}
	st.Origin = originBoot
	inst, err := d.launch(ctx, spec, st)
	if err != nil {
		return nil, d.failedStart(ctx, spec.ExecID, "start", err)
	}
	d.log.Info("execution started", "exec", spec.ExecID, "sandbox", spec.SandboxID, "pid", inst.Pid, "accel", st.Accel, "memory_mib", st.MemoryMiB, "origin", st.Origin)
	return inst, nil
}

// failedStart cleans up after a start or restore that failed and returns the
// error with QEMU's last words.
func (d *Driver) failedStart(ctx context.Context, execID, what string, err error) error {
	// Clean up with a fresh deadline: ctx may be what failed.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	detail := tailFile(filepath.Join(d.execDir(execID), qemuLog), 2048)
	if cerr := d.Cleanup(cctx, execID); cerr != nil {
		d.log.Error("cleanup after failed "+what, "exec", execID, "err", cerr)
	}
	if detail != "" {
		err = fmt.Errorf("%w (QEMU said: %s)", err, detail)
	}
	return fmt.Errorf("vm: exec %s: %s: %w", execID, what, err)
}

// register creates the execution's state directory and state file, so that
// Cleanup can undo a start that fails at any later point. The VM boots
// kernel with initrd on machine.
func (d *Driver) register(spec driver.Spec, kernel, machine, initrd string) (*state, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.Mkdir(d.execDir(spec.ExecID), 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("vm: exec %s: %w: already exists", spec.ExecID, errdefs.ErrConflict)
		}
		return nil, fmt.Errorf("vm: exec %s: create state: %w", spec.ExecID, err)
	}
	st := &state{
		ExecID:    spec.ExecID,
		SandboxID: spec.SandboxID,
		MemoryMiB: spec.MemoryMiB,
		CPUs:      max(spec.CPUs, 1),
		Source:    spec.RootFS,
		Kernel:    kernel,
		Initrd:    initrd,
		Machine:   machine,
		Network:   spec.Network,
	}
	if st.MemoryMiB == 0 {
		st.MemoryMiB = d.cfg.DefaultMemoryMiB
	}
	if err := d.saveState(st); err != nil {
		os.RemoveAll(d.execDir(spec.ExecID))
		return nil, err
	}
	return st, nil
}

func (d *Driver) launch(ctx context.Context, spec driver.Spec, st *state) (*driver.Instance, error) {
	dir := d.execDir(st.ExecID)
	if err := vmimage.CloneImage(ctx, spec.RootFS, filepath.Join(dir, diskFile)); err != nil {
		return nil, err
	}
	if err := writeGuestConfig(filepath.Join(dir, guestConfig), spec); err != nil {
		return nil, err
	}
	st.Accel = d.chooseAccel(ctx, st.Kernel, st.Initrd)
	if st.MemoryFile = d.memoryFiles(ctx); st.MemoryFile {
		if err := memoryFileRoom(dir, st.MemoryMiB, d.statfs); err != nil {
			d.log.Warn("vm memory: anonymous RAM for this VM", "exec", st.ExecID, "why", err)
			st.MemoryFile = false
		}
	}
	if st.MemoryFile {
		if err := d.createMemoryFile(st); err != nil {
			return nil, err
		}
	}
	cmd, err := d.qemuCommand(ctx, st, nil)
	if err != nil {
		return nil, err
	}
	if err := d.startQEMU(ctx, cmd, st); err != nil {
		return nil, err
	}
	if err := d.awaitQMP(ctx, st); err != nil {
		return nil, err
	}
	link, err := d.connectNetwork(ctx, st)
	if err != nil {
		return nil, err
	}
	return d.connectChannel(ctx, st, link)
}

// awaitQMP returns once QEMU greets on st's QMP socket: QEMU has then
// finished starting (machine built, disk and fw_cfg files opened) and runs
// its main loop, so that a pause, snapshot or stop right after Start finds
// it, and a removal of the execution's directory right after Start cannot
// make it fail to open its files. The socket accepting connections says
// less: it listens from the moment it is bound — by an unconfined QEMU
// before it opens the disk and the fw_cfg file, by the jail helper before
// it even execs QEMU — and the kernel queues connections QEMU has not yet
// accepted. (An unconfined QEMU binds QMP after the console and the guest
// channel, so those being there says nothing of QMP: a QMP command right
// after Start failed under load, "connect qmp.sock: no such file"; and a
// directory removed right after Start made QEMU exit with "could not open
// disk.img", TestStopRemoved/Unconfined.) A restore talks to QMP before it
// returns, through openQMP.
func (d *Driver) awaitQMP(ctx context.Context, st *state) error {
	c, err := d.dialRetry(ctx, st, qmpSock)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(qmpStartTimeout))
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	q := &qmpConn{rw: c, r: newReader(c)}
	if err := q.readGreeting(); err != nil {
		if !driver.ProcAlive(st.Pid, st.StartTime) {
			return fmt.Errorf("QEMU exited while starting: %w", err)
		}
		return fmt.Errorf("QEMU did not finish starting: %w", errors.Join(err, ctx.Err()))
	}
	return nil
}

// qmpStartTimeout bounds how long QEMU may take from binding its QMP socket
// to greeting on it (building the machine; seconds under TCG on a loaded
// host).
const qmpStartTimeout = 30 * time.Second

// startQEMU runs cmd, records QEMU's pid and start time in the state file
// and starts copying the console into its log.
func (d *Driver) startQEMU(ctx context.Context, cmd *exec.Cmd, st *state) error {
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", d.cfg.QEMU, err)
	}
	d.bg.Add(1)
	go func() {
		// The starting process reaps QEMU; after a restart QEMU is an
		// orphan that init reaps.
		defer d.bg.Done()
		_ = cmd.Wait()
	}()
	pid := cmd.Process.Pid
	startTime, err := driver.ProcStartTime(pid)
	if err != nil {
		return fmt.Errorf("QEMU exited at once: %w", err)
	}
	st.Pid, st.StartTime = pid, startTime
	if err := d.saveState(st); err != nil {
		return err
	}
	return d.startConsole(ctx, st)
}

// connectNetwork connects the host end of st's network interface; nil for
// a VM without one.
func (d *Driver) connectNetwork(ctx context.Context, st *state) (*driver.Link, error) {
	if !st.Network {
		return nil, nil
	}
	return d.connectLink(ctx, st)
}

// connectChannel connects to the guest channel's socket and returns the
// Instance that hands it out, with link (closed on failure).
func (d *Driver) connectChannel(ctx context.Context, st *state, link *driver.Link) (*driver.Instance, error) {
	ch, err := d.dialRetry(ctx, st, channelSock)
	if err != nil {
		link.Close()
		return nil, err
	}
	f, err := ch.File()
	ch.Close()
	if err != nil {
		link.Close()
		return nil, fmt.Errorf("guest channel: %w", err)
	}
	return &driver.Instance{ExecID: st.ExecID, Pid: st.Pid, StartTime: st.StartTime, Channel: f, Link: link}, nil
}

// writeGuestConfig writes the configuration the guest init reads via fw_cfg.
func writeGuestConfig(path string, spec driver.Spec) error {
	cfg := guestinit.Config{Hostname: spec.Hostname, Env: spec.Env, Network: spec.Network}
	if cfg.Hostname == "" {
		cfg.Hostname = spec.SandboxID
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	if len(b) > guestinit.MaxConfigBytes {
		return fmt.Errorf("%w: guest configuration is %d bytes, at most %d", errdefs.ErrInvalidArgument, len(b), guestinit.MaxConfigBytes)
	}
	return os.WriteFile(path, b, 0o600)
}

// qemuArgs is QEMU's command line for st. Paths of files in the state
// directory are relative: QEMU runs there (see dialState).
func qemuArgs(st *state) []string {
	m := layoutFor(st.Machine, st.Network)
	machine := m.machine
	if st.MemoryFile {
		machine += ",memory-backend=" + memBackendID
	}
	args := []string{"-M", machine}
	args = append(args, accelArgs(st.Accel)...)
	args = append(args,
		"-m", strconv.Itoa(st.MemoryMiB), "-smp", strconv.Itoa(st.CPUs),
		"-display", "none", "-nodefaults", "-no-user-config", "-no-reboot",
		"-name", "space-"+st.ExecID,
		"-kernel", st.Kernel, "-initrd", st.Initrd,
		"-append", kernelCmdline(m),
		"-drive", "file="+diskFile+",if=none,id=root,format=raw,discard=unmap",
		"-device", m.disk,
		"-device", m.serial,
		"-chardev", "socket,id="+channelChardev+",path="+channelSock+",server=on,wait=off",
		"-device", "virtserialport,chardev="+channelChardev+",id="+channelPortID+",name="+ChannelPort,
		"-chardev", "socket,id=con0,path="+consoleSock+",server=on,wait=off",
		"-serial", "chardev:con0",
		"-qmp", "unix:"+qmpSock+",server=on,wait=off",
		"-fw_cfg", "name="+guestinit.FWCfgName+",file="+guestConfig,
		"-object", "rng-random,id=rng0,filename=/dev/urandom",
		"-device", m.rng,
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
	)
	if st.MemoryFile {
		args = append(args, memoryFileArgs(st)...)
	}
	return append(args, networkArgs(m)...)
}

// accelArgs selects the accelerator and the CPU model: the host's CPU under
// KVM, every feature TCG emulates otherwise, with a translation buffer of
// the size the VMM's cgroup allows for (cgroup.go).
func accelArgs(accel string) []string {
	if accel == AccelKVM {
		return []string{"-accel", "kvm", "-cpu", "host"}
	}
	return []string{"-accel", tcgAccelOption, "-cpu", "max"}
}

// qemuCommand is QEMU's command for st. With incoming set, QEMU loads that
// migration stream (inherited as fd 3) instead of booting, and stays paused
// (-S) once loaded; for a VM with a RAM file, QEMU waits for the stream
// instead (-incoming defer), which launchRestore passes over QMP. QEMU's standard output and error go to qemu.log.
//
// Unless Config.Unconfined is set, the command is the jail helper
// (confine.go), which claims a uid for st (recorded in st, saved with the
// pid), enters the VMM's cgroup (cgroup.go, created here), opens qemu.log,
// binds QEMU's sockets and runs QEMU as that uid in a jail that shows only
// its own files. Its errors land in qemu.log, which failedStart reports.
func (d *Driver) qemuCommand(ctx context.Context, st *state, incoming *os.File) (*exec.Cmd, error) {
	dir := d.execDir(st.ExecID)
	args := qemuArgs(st)
	if incoming != nil {
		// No self-announce after the load: QEMU 7.2 (Debian 12) sends the
		// announce packets through a -netdev stream whose client may not
		// be connected yet and dies on a NULL dereference (q35, about 1
		// restore in 3, seen in dmesg). The gateway needs no gratuitous
		// ARP: it is the guest's only neighbour.
		args = append(args, "-global", "migration.announce-rounds=0", "-S")
		if st.MemoryFile {
			// The x-ignore-shared capability must be set before the
			// load (QEMU 7.2 has no -global for it): launchRestore sets
			// it and hands QEMU the stream over QMP.
			args = append(args, "-incoming", "defer")
		} else {
			args = append(args, "-incoming", "fd:3")
		}
	}
	var cmd *exec.Cmd
	if d.cfg.Unconfined {
		logf, err := os.OpenFile(filepath.Join(dir, qemuLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, err
		}
		// The child gets its own copy at Start, which comes after this
		// returns; this one is closed by its finalizer once the Cmd is
		// gone (after QEMU exits and is reaped).
		cmd = exec.Command(d.cfg.QEMU, args...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = logf, logf
		// Its own session: QEMU outlives the process that started it.
		cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true}
	} else {
		var err error
		if cmd, err = d.confinedCommand(ctx, st, args); err != nil {
			return nil, fmt.Errorf("confine QEMU: %w", err)
		}
	}
	if incoming != nil && !st.MemoryFile {
		cmd.ExtraFiles = []*os.File{incoming}
	}
	cmd.Env = []string{}
	return cmd, nil
}

// dialRetry connects to one of QEMU's sockets, waiting for QEMU to create it.
func (d *Driver) dialRetry(ctx context.Context, st *state, name string) (*net.UnixConn, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := d.dialState(ctx, st.ExecID, name)
		if err == nil {
			return c, nil
		}
		if !driver.ProcAlive(st.Pid, st.StartTime) {
			return nil, fmt.Errorf("QEMU exited before creating %s", name)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("QEMU did not create %s: %w", name, errors.Join(err, ctx.Err()))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startConsole connects to the serial console and copies it into the capped
// console log until QEMU exits.
func (d *Driver) startConsole(ctx context.Context, st *state) error {
	c, err := d.dialRetry(ctx, st, consoleSock)
	if err != nil {
		return err
	}
	l, err := openCappedLog(filepath.Join(d.execDir(st.ExecID), consoleLog), d.cfg.ConsoleLogBytes)
	if err != nil {
		c.Close()
		return err
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		defer l.Close()
		defer c.Close()
		copyConsole(l, c)
		// A stop or a delete kills QEMU; a guest whose daemon (its init)
		// died panics its kernel, which is worth a line with what the
		// console said: the execution is dead and the node recovers it.
		if tail := tailFile(filepath.Join(d.execDir(st.ExecID), consoleLog), 2048); strings.Contains(tail, initDiedPanic) {
			d.log.Warn("sandbox guest daemon exited", "exec", st.ExecID, "status", "the guest kernel panicked: its init died", "console", tail)
		}
	}()
	return nil
}

// initDiedPanic is what a Linux guest's console says when its init (the
// guest daemon) exits.
const initDiedPanic = "Attempted to kill init"
