package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/vmimage"
)

// Files of a vm checkpoint directory, beside driver.CheckpointManifest.
const (
	// cpMemory is QEMU's migration stream: RAM and device state, or the
	// device state alone in a MemoryFile checkpoint, whose RAM is cpRAM.
	cpMemory = "memory"
	// cpDisk is the reflink (or copy) of the disk at the time of the save.
	cpDisk = diskFile
	// cpGuestConfig is the fw_cfg configuration the VM booted with; a
	// restored VM is given the same bytes, so its machine is identical.
	cpGuestConfig = guestConfig
	// cpMeta holds vmMeta.
	cpMeta = "vm.json"
)

// vmMeta is what a restore needs beyond the generic checkpoint description:
// QEMU must be started with the same machine as the saved one.
type vmMeta struct {
	Accel  string `json:"accel"`
	Kernel string `json:"kernel"`
	Initrd string `json:"initrd"`
	// Machine is the QEMU machine type; a restore runs on the same one.
	// Empty in checkpoints written before it was recorded, which were q35.
	Machine string `json:"machine,omitempty"`
	// Network says the VM has a network interface: the restored QEMU gets
	// the same NIC (a device model must match the saved one), and the host
	// end of its link is connected anew.
	Network bool `json:"network,omitempty"`
	// HostConnected records whether a host held the guest channel when the
	// state was saved: the restored guest then still serves that old
	// session, and the host must wait for it to notice the disconnect.
	HostConnected bool `json:"host_connected"`
	// MemoryFile says the checkpoint's RAM is the file cpRAM (a reflink of
	// the VM's RAM file, memfile.go) and the stream holds only the device
	// state; false in checkpoints whose stream carries the RAM, as all did
	// before RAM files.
	MemoryFile bool `json:"memory_file,omitempty"`
}

// Timeouts of the checkpoint and restore steps (a TCG guest is slow).
const (
	migrateTimeout  = 5 * time.Minute
	reopenTimeout   = 5 * time.Second
	maxMetaFileSize = 1 << 20
)

// Checkpoint pauses the VM (QMP stop), writes its RAM and device state into
// dir/memory as a QEMU migration stream (over a descriptor passed on the QMP
// socket: -sandbox forbids QEMU to spawn or open files), then clones the disk
// into dir and writes the manifest with every file's digest. A VM whose RAM
// is a file (memfile.go) writes only its device state into the stream, and
// its RAM file is cloned into dir/ram. The VM stays
// paused; Resume lets it continue, Kill ends it. dir must not exist; on
// failure nothing of it is left.
func (d *Driver) Checkpoint(ctx context.Context, execID, dir string) (*driver.Checkpoint, error) {
	if err := driver.ValidHostPath("checkpoint dir", dir); err != nil {
		return nil, err
	}
	st, err := d.loadState(execID)
	if err != nil {
		return nil, err
	}
	if !driver.ProcAlive(st.Pid, st.StartTime) {
		return nil, fmt.Errorf("vm: exec %s: checkpoint: %w: QEMU is not running", execID, errdefs.ErrFailedPrecondition)
	}
	if st.PrivateRAM {
		return nil, fmt.Errorf("vm: exec %s: checkpoint: %w: its RAM is a private mapping of its template's (a measurement seam)", execID, errdefs.ErrFailedPrecondition)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("vm: exec %s: checkpoint: %w: %s already exists", execID, errdefs.ErrConflict, dir)
		}
		return nil, fmt.Errorf("vm: exec %s: checkpoint: %w", execID, err)
	}
	s, err := d.openQMP(ctx, st)
	if err == nil {
		var cp *driver.Checkpoint
		cp, _, err = d.checkpoint(ctx, s, st, dir)
		s.Close()
		if err == nil {
			return cp, nil
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("vm: exec %s: checkpoint into %s: %w", execID, dir, err)
}

func (d *Driver) checkpoint(ctx context.Context, s *qmpSession, st *state, dir string) (*driver.Checkpoint, vmMeta, error) {
	t0 := time.Now()
	if _, err := s.run("stop", nil); err != nil {
		return nil, vmMeta{}, err
	}
	connected, err := s.chardevConnected(channelChardev)
	if err != nil {
		return nil, vmMeta{}, err
	}
	if st.MemoryFile {
		// RAM stays out of the stream: it is the file, cloned below.
		if _, err := s.run("migrate-set-capabilities", map[string]any{"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": true}}}); err != nil {
			return nil, vmMeta{}, err
		}
	}
	// The default bandwidth cap (128 MiB/s) would slow a local save.
	if _, err := s.run("migrate-set-parameters", map[string]any{"max-bandwidth": int64(1) << 40}); err != nil {
		return nil, vmMeta{}, err
	}
	mem, err := os.OpenFile(filepath.Join(dir, cpMemory), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, vmMeta{}, err
	}
	_, err = s.run("getfd", map[string]string{"fdname": "checkpoint"}, int(mem.Fd()))
	mem.Close() // QEMU holds its own copy now
	if err != nil {
		return nil, vmMeta{}, err
	}
	if _, err := s.run("migrate", map[string]string{"uri": "fd:checkpoint"}); err != nil {
		return nil, vmMeta{}, err
	}
	if _, err := s.waitMigration(migrateTimeout); err != nil {
		return nil, vmMeta{}, fmt.Errorf("save memory and devices: %w (QEMU said: %s)", err, tailFile(filepath.Join(d.execDir(st.ExecID), qemuLog), 1024))
	}
	saved := time.Since(t0)
	// Completing the migration flushed the disk; QEMU does not write it
	// until the VM continues. Nor the RAM: the vCPUs are stopped, and the
	// clone writes back what the guest dirtied first.
	if err := vmimage.CloneImage(ctx, filepath.Join(d.execDir(st.ExecID), diskFile), filepath.Join(dir, cpDisk)); err != nil {
		return nil, vmMeta{}, err
	}
	files := []string{cpMemory, cpDisk, cpGuestConfig, cpMeta}
	if st.MemoryFile {
		if err := cloneRAM(ctx, filepath.Join(d.execDir(st.ExecID), memFile), filepath.Join(dir, cpRAM)); err != nil {
			return nil, vmMeta{}, err
		}
		files = append(files, cpRAM)
	}
	cloned := time.Since(t0)
	gc, err := os.ReadFile(filepath.Join(d.execDir(st.ExecID), guestConfig))
	if err != nil {
		return nil, vmMeta{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, cpGuestConfig), gc, 0o600); err != nil {
		return nil, vmMeta{}, err
	}
	meta := vmMeta{Accel: st.Accel, Kernel: st.Kernel, Initrd: st.Initrd, Machine: orQ35(st.Machine), Network: st.Network, HostConnected: connected, MemoryFile: st.MemoryFile}
	metaBytes, err := json.Marshal(meta)
	if err != nil {
		return nil, vmMeta{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, cpMeta), metaBytes, 0o600); err != nil {
		return nil, vmMeta{}, err
	}
	cp := &driver.Checkpoint{Dir: dir, CreatedAt: time.Now().UTC(), Runtime: d.Name(), MemoryMiB: st.MemoryMiB, CPUs: st.CPUs, Kernel: st.Kernel}
	var total int64
	for _, name := range files {
		fdir := dir
		if name == cpRAM {
			// The clone has the VM's RAM file's bytes and extents, and
			// that file's pages are in the page cache, the clone's not
			// (a reflink shares extents, not pages): hashing it reads no
			// disk. Were it to differ from the clone (QEMU writing a
			// paused guest's memory), the restore's check of the clone
			// refuses it.
			fdir = d.execDir(st.ExecID)
		}
		f, err := driver.DescribeFile(fdir, name)
		if err != nil {
			return nil, vmMeta{}, err
		}
		cp.Files = append(cp.Files, f)
		total += f.Size
	}
	if err := cp.WriteManifest(); err != nil {
		return nil, vmMeta{}, err
	}
	d.log.Info("checkpoint saved", "exec", st.ExecID, "dir", dir, "memory_bytes", cp.File(cpMemory).Size,
		"memory_file", st.MemoryFile, "save", saved.Round(time.Millisecond), "clone", cloned.Round(time.Millisecond), "total", time.Since(t0).Round(time.Millisecond), "host_connected", connected)
	return cp, meta, nil
}

// verified is a checkpoint whose files have been checked: the descriptors
// QEMU and the disk clone read, and the small files' contents.
type verified struct {
	cp          *driver.Checkpoint
	meta        vmMeta
	guestConfig []byte
	memory      *os.File
	disk        *os.File
	// ram is the RAM file of a MemoryFile checkpoint; nil otherwise.
	ram *os.File
}

func (v *verified) Close() {
	v.memory.Close()
	v.disk.Close()
	if v.ram != nil {
		v.ram.Close()
	}
}

// verifyCheckpoint checks cp's form, that it fits spec, and every file's
// size and digest, before any of them is used. A file this driver verified
// before and that has not changed since is not read again (d.verified): a
// template snapshot's RAM file and disk are hashed at its first restores,
// and later ones map the RAM file without reading it.
func (d *Driver) verifyCheckpoint(spec driver.Spec, cp *driver.Checkpoint) (*verified, error) {
	if cp == nil {
		return nil, fmt.Errorf("%w: no checkpoint", errdefs.ErrInvalidArgument)
	}
	if err := cp.Validate(); err != nil {
		return nil, err
	}
	if cp.Runtime != d.Name() {
		return nil, fmt.Errorf("%w: checkpoint %s is of runtime %q, not vm", errdefs.ErrInvalidArgument, cp.Dir, cp.Runtime)
	}
	if spec.MemoryMiB != 0 && spec.MemoryMiB != cp.MemoryMiB || spec.CPUs != 0 && spec.CPUs != cp.CPUs {
		return nil, fmt.Errorf("%w: checkpoint %s has %d MiB and %d CPUs; a restore cannot change them (asked %d MiB, %d CPUs)",
			errdefs.ErrInvalidArgument, cp.Dir, cp.MemoryMiB, cp.CPUs, spec.MemoryMiB, spec.CPUs)
	}
	v := &verified{cp: cp}
	var err error
	metaBytes, err := readVerified(cp, cpMeta, &d.verified)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(metaBytes, &v.meta); err != nil {
		return nil, fmt.Errorf("%w: checkpoint %s: %s: %v", errdefs.ErrInvalidArgument, cp.Dir, cpMeta, err)
	}
	if v.meta.Accel != AccelKVM && v.meta.Accel != AccelTCG || driver.ValidHostPath("kernel", v.meta.Kernel) != nil || driver.ValidHostPath("initrd", v.meta.Initrd) != nil {
		return nil, fmt.Errorf("%w: checkpoint %s: %s names accelerator %q, kernel %q, initrd %q", errdefs.ErrInvalidArgument, cp.Dir, cpMeta, v.meta.Accel, v.meta.Kernel, v.meta.Initrd)
	}
	// A VM restores on the machine it was saved on, with the kernel it
	// booted: both are the checkpoint's, whatever new VMs boot now
	// (UseKernel), and the kernel must still be on this host.
	v.meta.Machine = orQ35(v.meta.Machine)
	if !knownMachine(v.meta.Machine) {
		return nil, fmt.Errorf("%w: checkpoint %s was saved on QEMU machine %q; this driver runs q35 and microvm only",
			errdefs.ErrFailedPrecondition, cp.Dir, v.meta.Machine)
	}
	for _, p := range []string{v.meta.Kernel, v.meta.Initrd} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w: checkpoint %s needs %s, which is gone: %v", errdefs.ErrFailedPrecondition, cp.Dir, p, err)
		}
	}
	if v.guestConfig, err = readVerified(cp, cpGuestConfig, &d.verified); err != nil {
		return nil, err
	}
	if v.memory, err = cp.OpenVerifiedKnown(cpMemory, &d.verified); err != nil {
		return nil, err
	}
	if v.disk, err = cp.OpenVerifiedKnown(cpDisk, &d.verified); err != nil {
		v.memory.Close()
		return nil, err
	}
	if v.meta.MemoryFile {
		if v.ram, err = cp.OpenVerifiedKnown(cpRAM, &d.verified); err == nil {
			if err = checkRAMFile(v.ram, cp.Dir, cp.MemoryMiB); err != nil {
				err = fmt.Errorf("%w: %v", errdefs.ErrFailedPrecondition, err)
			}
		}
		if err != nil {
			v.Close()
			return nil, fmt.Errorf("the checkpoint's RAM is a file (%s says memory_file): %w", cpMeta, err)
		}
	}
	return v, nil
}

// readVerified returns the contents of a small checkpoint file after
// checking it.
func readVerified(cp *driver.Checkpoint, name string, known *driver.VerifiedFiles) ([]byte, error) {
	f, err := cp.OpenVerifiedKnown(name, known)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxMetaFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %s: %w", cp.Dir, name, err)
	}
	if len(b) > maxMetaFileSize {
		return nil, fmt.Errorf("%w: checkpoint %s: %s is larger than %d bytes", errdefs.ErrInvalidArgument, cp.Dir, name, maxMetaFileSize)
	}
	return b, nil
}

// Restore starts execution spec.ExecID from cp: every file is verified
// first (a mismatch is refused before QEMU starts), the disk is cloned from
// the checkpoint, QEMU loads the saved state (-incoming) and continues.
// spec.RootFS and spec.GuestBinary are not used (the checkpoint has the disk,
// kernel and initramfs) and may be empty; Hostname and Env reach the guest
// through the caller's Control.Init, as do fresh entropy and the clock.
//
// The restored VM has a network interface exactly when the checkpointed one
// had (its devices must be the saved ones); spec.Network is not consulted
// beyond a warning in the log when it disagrees, so the caller looks at
// Instance.Link, set when the VM has a network.
func (d *Driver) Restore(ctx context.Context, spec driver.Spec, cp *driver.Checkpoint) (*driver.Instance, error) {
	if cp != nil {
		if spec.RootFS == "" {
			spec.RootFS = filepath.Join(cp.Dir, cpDisk)
		}
		if spec.GuestBinary == "" {
			spec.GuestBinary = filepath.Join(cp.Dir, cpDisk)
		}
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	inst, err := d.restore(ctx, spec, cp, originCheckpoint)
	if err != nil {
		return nil, err
	}
	d.restores.Add(1)
	return inst, nil
}

// restore verifies cp and starts spec.ExecID from it.
func (d *Driver) restore(ctx context.Context, spec driver.Spec, cp *driver.Checkpoint, origin string) (*driver.Instance, error) {
	t0 := time.Now()
	v, err := d.verifyCheckpoint(spec, cp)
	if err != nil {
		return nil, fmt.Errorf("vm: exec %s: restore: %w", spec.ExecID, err)
	}
	defer v.Close()
	verifiedIn := time.Since(t0)
	spec.MemoryMiB, spec.CPUs = cp.MemoryMiB, cp.CPUs
	st, err := d.register(spec, v.meta.Kernel, v.meta.Machine, v.meta.Initrd)
	if err != nil {
		return nil, err
	}
	st.Accel, st.Origin = v.meta.Accel, origin
	if spec.Network != v.meta.Network {
		d.log.Warn("restore: the checkpoint's network setting wins over the spec's (a restored VM keeps its devices)",
			"exec", spec.ExecID, "from", cp.Dir, "checkpoint_network", v.meta.Network, "spec_network", spec.Network)
	}
	st.Network = v.meta.Network
	// The restored VM's RAM is of the checkpoint's kind.
	st.MemoryFile = v.meta.MemoryFile
	inst, err := d.launchRestore(ctx, st, v)
	if err != nil {
		return nil, d.failedStart(ctx, spec.ExecID, "restore", err)
	}
	known, hashed := d.verified.Counts()
	d.log.Info("execution restored", "exec", spec.ExecID, "sandbox", spec.SandboxID, "from", cp.Dir, "origin", origin,
		"pid", inst.Pid, "verify", verifiedIn.Round(time.Millisecond), "total", time.Since(t0).Round(time.Millisecond),
		"files_known", known, "files_hashed", hashed)
	return inst, nil
}

func (d *Driver) launchRestore(ctx context.Context, st *state, v *verified) (*driver.Instance, error) {
	dir := d.execDir(st.ExecID)
	// Clone the verified file itself, not whatever the path names now.
	if err := vmimage.CloneImageFrom(ctx, v.disk, filepath.Join(dir, diskFile)); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, guestConfig), v.guestConfig, 0o600); err != nil {
		return nil, err
	}
	if v.ram != nil {
		if err := memoryFileRoom(dir, st.MemoryMiB, d.statfs); err != nil {
			return nil, fmt.Errorf("restore a checkpoint whose RAM is a file: %w", err)
		}
		if d.privateTemplateRAM && st.Origin == originTemplate {
			// The measurement seam: the template's own file, mapped
			// privately.
			if err := os.Link(filepath.Join(v.cp.Dir, cpRAM), filepath.Join(dir, memFile)); err != nil {
				return nil, fmt.Errorf("link the template's RAM file: %w", err)
			}
			st.PrivateRAM = true
		} else if err := vmimage.CloneImageFrom(ctx, v.ram, filepath.Join(dir, memFile)); err != nil {
			// The VM's own copy-on-write clone: nothing it writes reaches
			// the checkpoint or any other VM restored from it.
			return nil, fmt.Errorf("clone the checkpoint's RAM file: %w", err)
		}
	}
	if err := d.saveState(st); err != nil {
		return nil, err
	}
	cmd, err := d.qemuCommand(ctx, st, v.memory)
	if err != nil {
		return nil, err
	}
	if err := d.startQEMU(ctx, cmd, st); err != nil {
		return nil, err
	}
	s, err := d.openQMP(ctx, st)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if st.MemoryFile {
		if err := loadDeviceState(s, v.memory); err != nil {
			return nil, err
		}
	}
	if err := waitLoaded(ctx, s, st); err != nil {
		return nil, err
	}
	// The link is connected before the guest runs: QEMU drops what the
	// guest sends while no host end is connected.
	link, err := d.connectNetwork(ctx, st)
	if err != nil {
		return nil, err
	}
	if _, err := s.run("cont", nil); err != nil {
		link.Close()
		return nil, err
	}
	if v.meta.HostConnected {
		// The guest still serves the session of the host that held the
		// channel at the save. The restored port tells it that host is
		// gone; connecting before the guest ended that session and opened
		// the port anew would hand the new host the old session. QEMU
		// first replays the saved port state, then reports the guest's
		// close and reopen (a guest that was between sessions times out
		// here, harmlessly).
		err := s.waitEvents(reopenTimeout, func(ev []*qmpMessage) bool {
			return reopened(portEvents(ev, channelPortID), 1)
		})
		if err != nil {
			d.log.Warn("restored guest did not reopen its channel in time; connecting anyway", "exec", st.ExecID, "err", err)
		}
	}
	return d.connectChannel(ctx, st, link)
}

// cloneRAM clones the VM's RAM file src into the checkpoint file dst.
func cloneRAM(ctx context.Context, src, dst string) error {
	f, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("RAM file: %w", err)
	}
	defer f.Close()
	if err := vmimage.CloneImageFrom(ctx, f, dst); err != nil {
		return fmt.Errorf("clone the RAM file: %w", err)
	}
	return nil
}

// loadDeviceState has QEMU, waiting with -incoming defer, load the device
// state from stream, with RAM left out (x-ignore-shared): the RAM is the
// file QEMU mapped at start.
func loadDeviceState(s *qmpSession, stream *os.File) error {
	if _, err := s.run("migrate-set-capabilities", map[string]any{"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": true}}}); err != nil {
		return fmt.Errorf("load the saved state: %w", err)
	}
	if _, err := s.run("getfd", map[string]string{"fdname": "incoming"}, int(stream.Fd())); err != nil {
		return fmt.Errorf("load the saved state: %w", err)
	}
	if _, err := s.run("migrate-incoming", map[string]string{"uri": "fd:incoming"}); err != nil {
		return fmt.Errorf("load the saved state: %w", err)
	}
	return nil
}

// waitLoaded waits until QEMU has loaded the incoming state (it leaves the
// inmigrate run state) or exits (a stream it cannot load ends it).
func waitLoaded(ctx context.Context, s *qmpSession, st *state) error {
	deadline := time.Now().Add(migrateTimeout)
	for {
		status, err := s.status()
		if err != nil {
			return fmt.Errorf("load the saved state: %w", err)
		}
		switch status {
		case "paused", "running":
			return nil
		case "inmigrate", "prelaunch":
		default:
			return fmt.Errorf("load the saved state: QEMU is %q", status)
		}
		if !driver.ProcAlive(st.Pid, st.StartTime) {
			return errors.New("load the saved state: QEMU exited")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("load the saved state: not done after %s", migrateTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// orQ35 returns machine, or MachineQ35 for the empty machine of states and
// checkpoints written before the machine was recorded.
func orQ35(machine string) string {
	if machine == "" {
		return MachineQ35
	}
	return machine
}
