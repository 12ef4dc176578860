package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Names of the files in an execution's state directory.
const (
	stateFile   = "state.json"
	diskFile    = "disk.img"
	guestConfig = "guest.json"
	channelSock = "channel.sock"
	qmpSock     = "qmp.sock"
	consoleSock = "console.sock"
	consoleLog  = "console.log"
	qemuLog     = "qemu.log"
)

// The guest channel's chardev and virtio-serial port device ids; QMP names
// the port in VSERPORT_CHANGE events by the latter.
const (
	channelChardev = "ch0"
	channelPortID  = "chport0"
)

// Origins of an execution (state.Origin).
const (
	originBoot       = "boot"
	originTemplate   = "template-snapshot"
	originCheckpoint = "checkpoint"
)

// state is what the driver persists about one execution, in
// StateDir/exec/<exec-id>/state.json.
type state struct {
	ExecID    string `json:"exec_id"`
	SandboxID string `json:"sandbox_id"`
	// Pid and StartTime name the QEMU process; 0 while starting.
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	// MemoryMiB and CPUs are the VM's size.
	MemoryMiB int `json:"memory_mib"`
	CPUs      int `json:"cpus"`
	// Accel is the accelerator QEMU runs with (kvm or tcg).
	Accel string `json:"accel"`
	// Source is the template image the disk was cloned from.
	Source string `json:"source"`
	// Kernel and Initrd are what the VM booted; a restore needs the same.
	Kernel string `json:"kernel"`
	Initrd string `json:"initrd"`
	// Machine is the QEMU machine type (MachineQ35 or MachineMicrovm; empty
	// in states written before it was recorded, which were q35).
	Machine string `json:"machine,omitempty"`
	// Network says the VM has a network interface (driver.Spec.Network)
	// whose backend is the stream socket netSock (see network.go).
	Network bool `json:"network,omitempty"`
	// MemoryFile says the guest's RAM is the file memFile in the
	// execution's directory (memfile.go), left out of the migration stream.
	MemoryFile bool `json:"memory_file,omitempty"`
	// PrivateRAM says the RAM file is a hard link of the template
	// snapshot's, mapped share=off (copy-on-write into anonymous memory):
	// set only by the measurement seam Driver.privateTemplateRAM
	// (BenchmarkIdlePSS); such a VM cannot be checkpointed.
	PrivateRAM bool `json:"private_ram,omitempty"`
	// Origin says how the execution started: originBoot, originTemplate or
	// originCheckpoint.
	Origin string `json:"origin,omitempty"`
	// UID and GID are the unprivileged host ids QEMU runs as, claimed for
	// this execution under StateDir/uids until its directory is removed
	// (see confine.go); 0 when the driver runs QEMU unconfined.
	UID uint32 `json:"uid,omitempty"`
	GID uint32 `json:"gid,omitempty"`
	// Cgroup is the parent of the VMM's cgroup, which is named after the
	// exec id (see cgroup.go); empty when QEMU runs unconfined, or was
	// started by a driver that made no groups.
	Cgroup string `json:"cgroup,omitempty"`
}

func (d *Driver) execDir(execID string) string {
	return filepath.Join(d.cfg.StateDir, "exec", execID)
}

func (d *Driver) loadState(execID string) (*state, error) {
	if err := driver.ValidID(execID); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(d.execDir(execID), stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("vm: exec %s: %w", execID, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("vm: exec %s: read state: %w", execID, err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("vm: exec %s: state file is corrupt (remove %s to forget the execution): %w", execID, d.execDir(execID), err)
	}
	if st.ExecID != execID {
		return nil, fmt.Errorf("vm: exec %s: state file names exec %q", execID, st.ExecID)
	}
	return &st, nil
}

// saveState writes the state file atomically.
func (d *Driver) saveState(st *state) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	dir := d.execDir(st.ExecID)
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("vm: exec %s: write state: %w", st.ExecID, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, stateFile)); err != nil {
		return fmt.Errorf("vm: exec %s: write state: %w", st.ExecID, err)
	}
	return nil
}

// dialState connects to a unix socket in the execution's directory. The
// directory's path may exceed the 108 bytes of sun_path, so QEMU binds the
// sockets relative to its working directory and the driver reaches them
// through /proc/self/fd/<dir fd>/<name>, which is always short.
func (d *Driver) dialState(ctx context.Context, execID, name string) (*net.UnixConn, error) {
	dir, err := os.OpenFile(d.execDir(execID), os.O_RDONLY|unix.O_DIRECTORY|unix.O_PATH, 0)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	p := "/proc/self/fd/" + strconv.Itoa(int(dir.Fd())) + "/" + name
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "unix", p)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", filepath.Join(d.execDir(execID), name), err)
	}
	return c.(*net.UnixConn), nil
}
