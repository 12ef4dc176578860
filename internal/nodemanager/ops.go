package nodemanager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/privop"
	"github.com/spacesandbox/space/internal/progress"
)

func (s *Server) ensureTemplate(ctx context.Context, uid uint32, a *privop.TemplateArgs) (*privop.TemplateOK, error) {
	if a == nil {
		return nil, invalid("template: missing arguments")
	}
	if err := privop.ValidTemplateName(a.Name); err != nil {
		return nil, err
	}
	if err := checkSourceOwner(uid, a.Source); err != nil {
		return nil, err
	}
	// Concurrent requests for one template share one build; a failure reaches
	// every waiter. The build must not die with the first caller's connection.
	v, err, _ := s.builds.Do(a.Name, func() (any, error) {
		return s.buildTemplate(context.WithoutCancel(ctx), a)
	})
	if err != nil {
		return nil, err
	}
	return v.(*privop.TemplateOK), nil
}

func (s *Server) buildTemplate(ctx context.Context, a *privop.TemplateArgs) (*privop.TemplateOK, error) {
	have, err := s.cfg.Storage.Templates(ctx)
	if err != nil {
		return nil, err
	}
	if slices.Contains(have, a.Name) {
		size := int64(0)
		if s.cfg.TemplateDir != nil {
			if dir, err := s.cfg.TemplateDir(a.Name); err == nil {
				size = dirSize(dir)
			}
		}
		return &privop.TemplateOK{SizeBytes: size}, nil
	}
	if a.Source == "" {
		return nil, fmt.Errorf("%w: template %q is not on this node and no source was given", errdefs.ErrNotFound, a.Name)
	}
	dest, err := s.cfg.Storage.CreateTemplate(ctx, a.Name)
	if errors.Is(err, errdefs.ErrConflict) {
		// An unsealed leftover of a build that was interrupted (the node
		// stopped midway): start over.
		s.log.Info("removing an unfinished build of the template", "name", a.Name)
		if derr := s.cfg.Storage.DeleteTemplate(ctx, a.Name); derr != nil {
			return nil, fmt.Errorf("template %s: remove unfinished build: %w", a.Name, derr)
		}
		dest, err = s.cfg.Storage.CreateTemplate(ctx, a.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("template %s: create volume: %w", a.Name, err)
	}
	s.log.Info("building template", "name", a.Name, "source", a.Source)
	tr := s.startBuild(a.Name)
	defer s.endBuild(a.Name)
	tr.Line("building from " + a.Source)
	source, err := s.resolveSnapshotSource(a.Source)
	if err != nil {
		_ = s.cfg.Storage.DeleteTemplate(ctx, a.Name)
		return nil, fmt.Errorf("template %s: %w", a.Name, err)
	}
	if err := s.cfg.Build(ctx, source, dest, logWriter{s, a.Name, tr}); err != nil {
		_ = s.cfg.Storage.DeleteTemplate(ctx, a.Name)
		return nil, fmt.Errorf("template %s: build from %s: %w", a.Name, a.Source, err)
	}
	failpoint.NodeManagerAfterBuild.Hit()
	tr.Line("sealing the template")
	if err := s.cfg.Storage.SealTemplate(ctx, a.Name); err != nil {
		_ = s.cfg.Storage.DeleteTemplate(ctx, a.Name)
		return nil, fmt.Errorf("template %s: seal: %w", a.Name, err)
	}
	failpoint.NodeManagerAfterTemplateSeal.Hit()
	size := dirSize(dest)
	tr.Line(fmt.Sprintf("built from %s: %s of files", a.Source, progress.Bytes(size)))
	s.log.Info("template ready", "name", a.Name)
	last := tr.Current()
	last.Final = true
	return &privop.TemplateOK{SizeBytes: size, Progress: &last}, nil
}

// resolveSnapshotSource turns a snapshot:ID source (the filesystem of a
// sandbox's disk snapshot on this node, as a Dockerfile build leaves it)
// into a source the builder reads: dir: of an ns snapshot's tree, ext4: of
// a vm snapshot's disk image (read in user space, never mounted: its guest
// wrote it). Either way the template is a tree, which serves both
// runtimes. Other sources are returned as they are.
func (s *Server) resolveSnapshotSource(source string) (string, error) {
	id, ok := strings.CutPrefix(source, "snapshot:")
	if !ok {
		return source, nil
	}
	dir, err := s.snapshotDir(id)
	if err != nil {
		return "", fmt.Errorf("source %s: %w", source, err)
	}
	info, err := readSnapshotInfo(dir)
	if err != nil {
		return "", fmt.Errorf("%w: source %s: the snapshot is not on this node", errdefs.ErrNotFound, source)
	}
	if info.Kind != privop.SnapshotDisk {
		return "", fmt.Errorf("%w: source %s: a template is made only from a disk snapshot (this one is a %s snapshot on %s)", errdefs.ErrFailedPrecondition, source, info.Kind, info.Runtime)
	}
	if s.cfg.ImageRuntimes[info.Runtime] {
		return "ext4:" + filepath.Join(dir, snapshotDiskImage), nil
	}
	if s.cfg.SnapshotPath == nil {
		return "", fmt.Errorf("%w: source %s: this node-manager keeps no snapshot trees", errdefs.ErrFailedPrecondition, source)
	}
	tree, err := s.cfg.SnapshotPath(id)
	if err != nil {
		return "", fmt.Errorf("source %s: %w", source, err)
	}
	return "dir:" + tree, nil
}

// checkSourceOwner stops an unprivileged caller from having root copy files it
// could not read itself into a template: a dir, tar or ext4 source must belong
// to it (a snapshot: source is resolved to one after this check).
func checkSourceOwner(uid uint32, source string) error {
	if uid == 0 {
		return nil
	}
	kind, path, ok := strings.Cut(source, ":")
	if !ok || (kind != "dir" && kind != "tar" && kind != "ext4") {
		return nil
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("%w: template source: %v", errdefs.ErrInvalidArgument, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != uid {
		return fmt.Errorf("%w: template source %s must be owned by the caller (uid %d)", errdefs.ErrPermissionDenied, path, uid)
	}
	return nil
}

func (s *Server) deleteTemplate(ctx context.Context, a *privop.TemplateArgs) error {
	if a == nil {
		return invalid("template: missing arguments")
	}
	if err := privop.ValidTemplateName(a.Name); err != nil {
		return err
	}
	if err := s.removeDiskImage(a.Name); err != nil {
		return fmt.Errorf("template %s: remove disk image: %w", a.Name, err)
	}
	return s.cfg.Storage.DeleteTemplate(ctx, a.Name)
}

// templatePresent checks that template is on the node.
func (s *Server) templatePresent(ctx context.Context, template string) error {
	have, err := s.cfg.Storage.Templates(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(have, template) {
		return fmt.Errorf("%w: template %q is not on this node", errdefs.ErrTemplateMissing, template)
	}
	return nil
}

func (s *Server) start(ctx context.Context, a *privop.StartArgs) (*privop.Started, []*os.File, error) {
	if s.settingUp(a.Runtime) {
		// Hello reports it pending, so the control plane places on this
		// node (and restores here) while it is set up: a start now waits
		// for it, it is not a request for a runtime the node lacks.
		return nil, nil, fmt.Errorf("%w: the %s runtime is still being set up on this node (after a start of the node-manager); retry", errdefs.ErrUnavailable, a.Runtime)
	}
	if err := a.Validate(s.runtimes()); err != nil {
		return nil, nil, err
	}
	started, ch, err := s.startOnce(ctx, a)
	if errors.Is(err, errdefs.ErrConflict) {
		// A start of this execution was interrupted (the node-manager or
		// its caller died midway) and left its volume or driver state:
		// nothing serves it (the sandbox manager asks only for executions
		// it holds no record of), so clear the leftovers and start again.
		s.log.Info("clearing the leftovers of an interrupted start", "exec", a.ExecID, "reason", err)
		if cerr := s.cleanup(ctx, a.ExecID, a.Runtime); cerr != nil {
			return nil, nil, fmt.Errorf("%w (and clearing it failed: %v)", err, cerr)
		}
		started, ch, err = s.startOnce(ctx, a)
	}
	return started, ch, err
}

func (s *Server) startOnce(ctx context.Context, a *privop.StartArgs) (*privop.Started, []*os.File, error) {
	t0 := time.Now()
	var root string
	var cp *driver.Checkpoint
	var err error
	switch {
	case a.Snapshot != "":
		root, cp, err = s.snapshotRoot(ctx, a)
	case s.cfg.ImageRuntimes[a.Runtime]:
		// The runtime clones the image itself, next to its other state.
		if err = s.templatePresent(ctx, a.Template); err == nil {
			root, err = s.diskImage(ctx, a.Template)
		}
	default:
		if err = s.templatePresent(ctx, a.Template); err == nil {
			root, err = s.cfg.Storage.Clone(ctx, a.Template, a.ExecID)
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("exec %s: root filesystem: %w", a.ExecID, err)
	}
	if cp == nil && !s.cfg.ImageRuntimes[a.Runtime] {
		if err := s.limitDisk(ctx, a); err != nil {
			_ = s.cfg.Storage.Delete(context.WithoutCancel(ctx), a.ExecID)
			return nil, nil, fmt.Errorf("exec %s: root filesystem: %w", a.ExecID, err)
		}
	}
	if a.Snapshot != "" {
		failpoint.NodeManagerAfterSnapshotClone.Hit()
	} else {
		failpoint.NodeManagerAfterClone.Hit()
	}
	tCloned := time.Now()
	spec := driver.Spec{
		ExecID:      a.ExecID,
		SandboxID:   a.SandboxID,
		RootFS:      root,
		GuestBinary: s.cfg.GuestBinary,
		Hostname:    a.Hostname,
		CPUs:        a.CPUs,
		MemoryMiB:   a.MemoryMiB,
		PidsMax:     a.PidsMax,
		OwnDisk:     a.Snapshot != "",
		Network:     a.Network,
		Env:         guestFailpoints(),
	}
	var inst *driver.Instance
	if cp != nil {
		r, ok := s.driver(a.Runtime).(driver.Restorer)
		if !ok {
			return nil, nil, fmt.Errorf("%w: the %s runtime cannot restore a full snapshot", errdefs.ErrFailedPrecondition, a.Runtime)
		}
		// A checkpoint needs no root path: it carries its own disk.
		spec.RootFS = cp.Dir
		inst, err = r.Restore(ctx, spec, cp)
	} else {
		inst, err = s.driver(a.Runtime).Start(ctx, spec)
	}
	if err != nil {
		_ = s.cfg.Storage.Delete(context.WithoutCancel(ctx), a.ExecID)
		return nil, nil, fmt.Errorf("exec %s: start %s: %w", a.ExecID, a.Runtime, err)
	}
	if a.Snapshot != "" {
		failpoint.NodeManagerAfterSnapshotRuntime.Hit()
	} else {
		failpoint.NodeManagerAfterRuntime.Hit()
	}
	s.mu.Lock()
	s.owner[a.ExecID] = a.Runtime
	s.mu.Unlock()
	s.log.Debug("execution started", "exec", a.ExecID, "clone", tCloned.Sub(t0), "runtime", time.Since(tCloned))
	started := &privop.Started{Pid: inst.Pid, StartTime: inst.StartTime}
	files := []*os.File{inst.Channel}
	if inst.Link != nil {
		started.Link = string(inst.Link.Framing)
		files = append(files, inst.Link.File)
	}
	return started, files, nil
}

// driversFor lists the drivers that may own execID: the named runtime's, or
// the one that started it in this process, else all of them (after a restart
// each answers for its own). A named runtime whose driver is not ready yet
// (the vm runtime sets up in the background) is Unavailable: answering for it
// with the other drivers would report a running VM as cleaned up.
func (s *Server) driversFor(execID, runtime string) ([]driver.Driver, error) {
	if runtime == "" {
		s.mu.Lock()
		runtime = s.owner[execID]
		s.mu.Unlock()
	}
	if runtime != "" {
		d := s.driver(runtime)
		if d == nil {
			return nil, fmt.Errorf("%w: the %s runtime is not ready on this node yet; retry", errdefs.ErrUnavailable, runtime)
		}
		return []driver.Driver{d}, nil
	}
	var all []driver.Driver
	for _, d := range s.allDrivers() {
		all = append(all, d)
	}
	return all, nil
}

func (s *Server) cleanup(ctx context.Context, execID, runtime string) error {
	if err := privop.ValidExecID(execID); err != nil {
		return err
	}
	drivers, err := s.driversFor(execID, runtime)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range drivers {
		if err := d.Kill(ctx, execID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			errs = append(errs, fmt.Errorf("kill: %w", err))
		}
		if err := d.Cleanup(ctx, execID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			errs = append(errs, fmt.Errorf("cleanup: %w", err))
		}
	}
	failpoint.NodeManagerAfterKill.Hit()
	if err := s.cfg.Storage.Delete(ctx, execID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		errs = append(errs, fmt.Errorf("delete root: %w", err))
	}
	failpoint.NodeManagerAfterRootDelete.Hit()
	s.mu.Lock()
	delete(s.owner, execID)
	s.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("exec %s: %w", execID, err)
	}
	return nil
}

func (s *Server) pauseResume(ctx context.Context, op privop.Op, execID, runtime string) error {
	if err := privop.ValidExecID(execID); err != nil {
		return err
	}
	drivers, err := s.driversFor(execID, runtime)
	if err != nil {
		return err
	}
	for _, d := range drivers {
		p, ok := d.(driver.Pauser)
		if !ok {
			continue
		}
		if op == privop.OpPause {
			err := p.Pause(ctx, execID)
			if err == nil {
				failpoint.NodeManagerAfterFreeze.Hit()
			}
			return err
		}
		err := p.Resume(ctx, execID)
		if err == nil {
			failpoint.NodeManagerAfterThaw.Hit()
		}
		return err
	}
	return fmt.Errorf("%w: the runtime of exec %s cannot pause", errdefs.ErrFailedPrecondition, execID)
}

func (s *Server) stats(ctx context.Context, execID, runtime string) (*privop.Stats, error) {
	if err := privop.ValidExecID(execID); err != nil {
		return nil, err
	}
	drivers, err := s.driversFor(execID, runtime)
	if err != nil {
		return nil, err
	}
	var last error
	for _, d := range drivers {
		st, err := d.Stats(ctx, execID)
		if err == nil {
			out := &privop.Stats{MemoryBytes: st.MemoryBytes, MemoryCacheBytes: st.MemoryCacheBytes, Pids: st.Pids, CPUNanos: st.CPUNanos,
				DiskBytes: st.DiskBytes, DiskLimitBytes: st.DiskLimitBytes}
			s.diskStats(ctx, execID, out)
			return out, nil
		}
		last = err
	}
	return nil, last
}

func (s *Server) reopenLink(ctx context.Context, execID, runtime string) (*driver.Link, error) {
	if err := privop.ValidExecID(execID); err != nil {
		return nil, err
	}
	drivers, err := s.driversFor(execID, runtime)
	if err != nil {
		return nil, err
	}
	for _, d := range drivers {
		if r, ok := d.(driver.LinkReopener); ok {
			if alive, err := d.Alive(ctx, execID); err == nil && alive {
				return r.ReopenLink(ctx, execID)
			}
		}
	}
	return nil, fmt.Errorf("%w: exec %s: no running execution whose link can be reopened", errdefs.ErrFailedPrecondition, execID)
}

func (s *Server) alive(ctx context.Context, execID, runtime string) (bool, error) {
	if err := privop.ValidExecID(execID); err != nil {
		return false, err
	}
	drivers, err := s.driversFor(execID, runtime)
	if err != nil {
		return false, err
	}
	for _, d := range drivers {
		if ok, err := d.Alive(ctx, execID); err == nil && ok {
			return true, nil
		}
	}
	return false, nil
}

// listExecutions asks every ready runtime which executions it holds state
// for, sorted by runtime and id.
func (s *Server) listExecutions(ctx context.Context) (*privop.Executions, error) {
	out := &privop.Executions{Executions: []privop.HeldExecution{}}
	drivers := s.allDrivers()
	names := make([]string, 0, len(drivers))
	for name := range drivers {
		names = append(names, name)
	}
	slices.Sort(names)
	// Volumes first: a start clones its volume before its runtime holds
	// it, so a volume listed before the runtimes were asked and running by
	// then is listed with its runtime, never as a leftover.
	vols, err := s.cfg.Storage.Volumes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the volumes: %w", err)
	}
	held := map[string]bool{}
	for _, name := range names {
		ids, err := drivers[name].List(ctx)
		if err != nil {
			return nil, fmt.Errorf("list the executions of the %s runtime: %w", name, err)
		}
		for _, id := range ids {
			out.Executions = append(out.Executions, privop.HeldExecution{ExecID: id, Runtime: name})
			held[id] = true
		}
	}
	out.Pending = s.hello().Pending
	if len(out.Pending) > 0 {
		// A runtime not set up yet may hold a volume's execution.
		return out, nil
	}
	s.mu.Lock()
	for _, v := range vols {
		if !held[v] && !s.importing[v] && privop.ValidExecID(v) == nil {
			// A root no runtime holds: a start or a cleanup that died
			// between the volume and the runtime's state.
			out.Executions = append(out.Executions, privop.HeldExecution{ExecID: v, VolumeOnly: true})
		}
	}
	s.mu.Unlock()
	return out, nil
}

// logWriter turns template build progress into log lines and readings of
// the build's tracker.
type logWriter struct {
	s    *Server
	name string
	tr   *progress.Tracker
}

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		// A tool that redraws its own line (\r) shows the latest part.
		line = strings.TrimRight(line, "\r")
		if i := strings.LastIndexByte(line, '\r'); i >= 0 {
			line = line[i+1:]
		}
		if line != "" {
			w.s.log.Info("template build", "name", w.name, "progress", line)
			w.tr.Line(clip(line, maxProgressLine))
		}
	}
	return len(p), nil
}

var _ io.Writer = logWriter{}

// maxProgressLine bounds the runes of a build's output line that its
// readings carry (each is stored on the template's record).
const maxProgressLine = 240

// clip cuts s to at most n runes.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

func dirSize(root string) int64 {
	var n int64
	_ = filepath.WalkDir(root, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// guestFailpoints is the environment that arms, in the guest daemon of an
// execution this node-manager starts, the guest failpoints the
// node-manager was armed with (tests); nil when none is.
func guestFailpoints() map[string]string {
	var env map[string]string
	for _, kv := range failpoint.ChildEnv(failpoint.Guest) {
		k, v, _ := strings.Cut(kv, "=")
		env = map[string]string{k: v}
	}
	return env
}
