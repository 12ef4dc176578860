package ns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"slices"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/cgroup"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
)

// initConfig is what the parent sends ns-init over the sync socket, together
// with two mount fds (the rootfs and the guest binary, both detached mounts).
type initConfig struct {
	Hostname string   `json:"hostname"`
	Env      []string `json:"env"`
	// Network says the parent created the tap sandboxnet.IfName in the
	// sandbox's network namespace: ns-init configures it.
	Network bool `json:"network,omitempty"`
	// WorkloadTasks is the number n of the workload's tasks files that
	// follow the root and the guest binary among the message's fds; n of
	// the sandbox group's follow them (reserve.go). 0 on a cgroup v2 host.
	WorkloadTasks int `json:"workload_tasks,omitempty"`
	// OwnClock asks for a time namespace whose clocks start with the
	// sandbox (clock.go); false on a kernel without time namespaces.
	OwnClock bool `json:"own_clock,omitempty"`
}

// maxInitMessage bounds the sync messages in both directions.
const maxInitMessage = 256 << 10

// Start launches the execution: state and uid range, cgroup, the ns-init
// process in new namespaces, its id-mapped root, and the handshake that ends
// when ns-init has exec'd the guest daemon (or reported why it could not).
func (d *Driver) Start(ctx context.Context, spec driver.Spec) (*driver.Instance, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := checkPaths(spec); err != nil {
		return nil, err
	}
	st, err := d.register(spec)
	if err != nil {
		return nil, err
	}
	inst, err := d.launch(ctx, spec, st)
	if err != nil {
		// Clean up with a fresh deadline: ctx may be what failed.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := d.Cleanup(cctx, spec.ExecID); cerr != nil {
			d.log.Error("cleanup after failed start", "exec", spec.ExecID, "err", cerr)
		}
		return nil, fmt.Errorf("ns: exec %s: start: %w", spec.ExecID, err)
	}
	d.log.Info("execution started", "exec", spec.ExecID, "sandbox", spec.SandboxID, "pid", inst.Pid, "uid_base", st.UIDBase, "shifted", st.Shifted)
	return inst, nil
}

func checkPaths(spec driver.Spec) error {
	fi, err := os.Lstat(spec.RootFS)
	if err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: ns: rootfs %s is not a directory (symlinks are refused): %v", errdefs.ErrInvalidArgument, spec.RootFS, err)
	}
	fi, err = os.Stat(spec.GuestBinary)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o001 == 0 {
		return fmt.Errorf("%w: ns: guest binary %s must be a regular file executable by others: %v", errdefs.ErrInvalidArgument, spec.GuestBinary, err)
	}
	return nil
}

// register creates the execution's state directory and allocates its uid
// range, so that Cleanup can undo a start that fails at any later point.
func (d *Driver) register(spec driver.Spec) (*state, error) {
	unlock, err := d.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := os.Mkdir(d.execDir(spec.ExecID), 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("ns: exec %s: %w: already exists", spec.ExecID, errdefs.ErrConflict)
		}
		return nil, fmt.Errorf("ns: exec %s: create state: %w", spec.ExecID, err)
	}
	slot, err := d.allocSlot(spec.SandboxID)
	if err != nil {
		os.Remove(d.execDir(spec.ExecID))
		return nil, err
	}
	st := &state{
		ExecID:       spec.ExecID,
		SandboxID:    spec.SandboxID,
		CgroupParent: d.cfg.CgroupParent,
		OwnCPU:       true,
		UIDBase:      d.cfg.UIDBase + uint32(slot)*RangeSize,
		RootFS:       spec.RootFS,
		Network:      spec.Network,
	}
	if err := d.saveState(st); err != nil {
		os.RemoveAll(d.execDir(spec.ExecID))
		return nil, err
	}
	return st, nil
}

func (d *Driver) launch(ctx context.Context, spec driver.Spec, st *state) (*driver.Instance, error) {
	g, err := d.group(st)
	if err != nil {
		return nil, err
	}
	mem := spec.MemoryMiB
	if mem == 0 {
		mem = d.cfg.DefaultMemoryMiB
	}
	limits := cgroup.Limits{MemoryBytes: int64(mem) << 20, PidsMax: spec.PidsMax, CPUs: spec.CPUs}
	if err := g.Create(limits); err != nil {
		return nil, err
	}
	into, back, err := d.workloadTasks(g, limits)
	if err != nil {
		return nil, err
	}
	defer closeFiles(into)
	defer closeFiles(back)
	chanHost, chanChild, err := socketpair(unix.SOCK_STREAM)
	if err != nil {
		return nil, err
	}
	defer chanChild.Close()
	syncHost, syncChild, err := socketpair(unix.SOCK_SEQPACKET)
	if err != nil {
		chanHost.Close()
		return nil, err
	}
	defer syncChild.Close()
	syncConn, err := net.FileConn(syncHost)
	syncHost.Close()
	if err != nil {
		chanHost.Close()
		return nil, fmt.Errorf("sync socket: %w", err)
	}
	defer syncConn.Close()

	cmd := d.initCommand(st, chanChild, syncChild)
	err = startOwned(cmd, st.UIDBase) // owner.go: the sandbox's kernel budgets are its own
	// The child's ends must close here: the sync socket reports the exec by
	// reaching EOF, which it cannot while this process holds a copy.
	chanChild.Close()
	syncChild.Close()
	if err != nil {
		chanHost.Close()
		return nil, fmt.Errorf("run ns-init (%s): %w", d.cfg.InitPath, err)
	}
	d.reapers.Add(1)
	go func() {
		// The starting process reaps its child; after a restart the sandbox
		// is an orphan that init reaps.
		defer d.reapers.Done()
		err := cmd.Wait()
		// A kill (a stop, a delete, the OOM killer) ends it by a signal;
		// a guest daemon that exits on its own with a failure is worth a
		// line: the execution is dead and the node recovers it.
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.Exited() && ee.ExitCode() != 0 {
			d.log.Warn("sandbox guest daemon exited", "exec", spec.ExecID, "pid", cmd.Process.Pid, "status", err.Error())
		}
	}()
	inst, err := d.handshake(ctx, spec, st, g, cmd.Process.Pid, syncConn.(*net.UnixConn), slices.Concat(into, back))
	if err != nil {
		chanHost.Close()
		return nil, err
	}
	inst.Channel = chanHost
	return inst, nil
}

func (d *Driver) initCommand(st *state, chanChild, syncChild *os.File) *exec.Cmd {
	cmd := &exec.Cmd{
		Path:       d.cfg.InitPath,
		Args:       append([]string{InitHelper}, d.cfg.InitArgs...),
		Env:        []string{},
		ExtraFiles: []*os.File{chanChild, syncChild}, // fd 3 and fd 4
	}
	idmap := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(st.UIDBase), Size: RangeSize}}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// No CLONE_NEWCGROUP here: ns-init unshares it once the parent has
		// moved it into its groups, so that the namespace is rooted there.
		Cloneflags:                 unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		UidMappings:                idmap,
		GidMappings:                idmap,
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
		Setsid:                     true,
	}
	return cmd
}

// handshake places the child in its cgroup, prepares its mounts, sends its
// configuration and waits for the exec (the sync socket closes on exec) or an
// error report.
//
// tasks are the workload's tasks files and then the sandbox group's
// (reserve.go), passed on to the guest daemon.
func (d *Driver) handshake(ctx context.Context, spec driver.Spec, st *state, g *cgroup.Group, pid int, conn *net.UnixConn, tasks []*os.File) (*driver.Instance, error) {
	startTime, err := driver.ProcStartTime(pid)
	if err != nil {
		return nil, fmt.Errorf("ns-init exited at once: %w", err)
	}
	st.Pid, st.StartTime = pid, startTime
	if err := d.saveState(st); err != nil {
		return nil, err
	}
	if err := g.AddProc(pid); err != nil {
		return nil, err
	}
	mounts, err := d.prepareMounts(spec, st, pid)
	if err != nil {
		return nil, err
	}
	defer mounts.Close()
	if st.Shifted {
		if err := d.saveState(st); err != nil {
			return nil, err
		}
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.SandboxID
	}
	msg, err := json.Marshal(initConfig{Hostname: hostname, Env: envList(spec.Env), Network: spec.Network, WorkloadTasks: len(tasks) / 2, OwnClock: d.timeNS})
	if err != nil {
		return nil, err
	}
	// The tap exists before ns-init is told to configure it.
	var link *driver.Link
	if spec.Network {
		if link, err = createTap(pid); err != nil {
			return nil, err
		}
	}
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if _, _, err := conn.WriteMsgUnix(msg, unix.UnixRights(append([]int{mounts.rootFD, mounts.guestFD}, fdsOf(tasks)...)...), nil); err != nil {
		link.Close()
		return nil, fmt.Errorf("send config to ns-init: %w", err)
	}
	if err := waitExec(ctx, conn); err != nil {
		link.Close()
		return nil, err
	}
	if !driver.ProcAlive(pid, startTime) {
		link.Close()
		return nil, errors.New("the sandbox init exited right after exec (see the guest binary's requirements: static, x86_64)")
	}
	return &driver.Instance{ExecID: spec.ExecID, Pid: pid, StartTime: startTime, Link: link}, nil
}

// waitExec reads ns-init's one message, an error report, or the close of
// the sync socket on exec.
func waitExec(ctx context.Context, conn *net.UnixConn) error {
	buf := make([]byte, maxInitMessage)
	n, err := conn.Read(buf)
	switch {
	case n > 0:
		return fmt.Errorf("ns-init: %s", sanitize(buf[:n]))
	case ctx.Err() != nil:
		return fmt.Errorf("waiting for ns-init: %w", ctx.Err())
	case err != nil && !errors.Is(err, io.EOF):
		return fmt.Errorf("waiting for ns-init: %w", err)
	}
	return nil
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env)+1)
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	if _, ok := env["PATH"]; !ok {
		out = append(out, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	sort.Strings(out)
	return out
}

// sanitize keeps an error report from ns-init printable and short.
func sanitize(b []byte) string {
	if len(b) > 2048 {
		b = b[:2048]
	}
	out := make([]rune, 0, len(b))
	for _, r := range string(b) {
		if r < 0x20 && r != '\n' || r == 0x7f {
			r = '?'
		}
		out = append(out, r)
	}
	return string(out)
}

func socketpair(typ int) (host, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "child"), nil
}
