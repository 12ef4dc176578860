package guestd

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
)

// defaultPath is PATH for processes whose environment does not set one.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// spawnRequest is a validated StartRequest with its caller.
type spawnRequest struct {
	config   *processv1.ProcessConfig
	tag      *string
	pty      *processv1.PTY
	stdin    bool
	user     caller
	deadline time.Time // zero: none
}

// spawn starts the process and its pumps and waiter. first is subscribed
// before the process can write anything.
func (d *Daemon) spawn(req spawnRequest) (*process, *subscriber, error) {
	env, err := d.processEnv(req)
	if err != nil {
		return nil, nil, err
	}
	cwd, err := d.processDir(req)
	if err != nil {
		return nil, nil, err
	}
	bin, err := lookPath(req.config.GetCmd(), envValue(env, "PATH"), cwd)
	if err != nil {
		return nil, nil, err
	}
	cred, err := credentialFor(req.user.account)
	if err != nil {
		return nil, nil, err
	}
	io, err := newProcessIO(req.pty, req.stdin)
	if err != nil {
		return nil, nil, err
	}
	p := &process{
		tag: req.tag, config: req.config, pty: io.master, stdin: io.stdinW, touch: d.touch,
		subs: map[*subscriber]struct{}{}, ended: make(chan struct{}),
	}
	first, _ := p.subscribe()
	argv := append([]string{req.config.GetCmd()}, req.config.GetArgs()...)
	attr := &syscall.ProcAttr{
		Dir: cwd, Env: env, Files: io.childFds(),
		Sys: &syscall.SysProcAttr{Credential: cred, Setpgid: io.master == nil, Setsid: io.master != nil, Setctty: io.master != nil},
	}
	if fd := d.workload.cgroupFD(); fd >= 0 {
		// Born in the workload group (clone3 CLONE_INTO_CGROUP): never a
		// moment outside its limits.
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, fd
	}
	_, err = d.procs.insert(req.tag, func() (*process, error) {
		pid, exited, err := d.reaper.start(func() (int, error) {
			return d.forkInWorkload(func() (int, error) { return syscall.ForkExec(bin, argv, attr) })
		})
		if err != nil {
			return nil, err
		}
		p.pid = pid
		go d.waitProcess(p, exited, io, req.deadline)
		return p, nil
	})
	io.closeChildEnds()
	if err != nil {
		io.closeParentEnds()
		return nil, nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return p, first, nil
}

// waitProcess owns a running process: it runs the output pumps, kills the
// process at its deadline, and after exit drains output, sends the end event
// and removes the process from the table.
func (d *Daemon) waitProcess(p *process, exited <-chan unix.WaitStatus, io *processIO, deadline time.Time) {
	var pumps sync.WaitGroup
	for _, r := range io.readers() {
		pumps.Add(1)
		go p.pump(r.f, r.wrap, &pumps)
	}
	if !deadline.IsZero() {
		t := time.AfterFunc(time.Until(deadline), func() { _ = p.signal(unix.SIGKILL) })
		defer t.Stop()
	}
	ws := <-exited
	p.mu.Lock()
	p.reaped = true
	p.mu.Unlock()

	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainAfterExit):
		io.closeReaders()
		<-drained
	}
	io.closeParentEnds()
	p.stdinMu.Lock()
	p.stdin = nil
	p.stdinMu.Unlock()
	d.procs.remove(p)
	d.touch()
	p.finish(endEvent(ws))
}

// processEnv is PATH, HOME, USER, then the image's Env, then Init's
// variables, then the request's: each later one wins.
func (d *Daemon) processEnv(req spawnRequest) ([]string, error) {
	m := map[string]string{"PATH": defaultPath, "HOME": req.user.Home}
	if req.user.Name != "" { // a bare uid (an image's numeric User) has no name
		m["USER"], m["LOGNAME"] = req.user.Name, req.user.Name
	}
	imagePATH := false
	for _, kv := range d.image.get().Env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
		imagePATH = imagePATH || k == "PATH"
	}
	for k, v := range d.ident.envVars() {
		m[k] = v
		imagePATH = imagePATH && k != "PATH"
	}
	for k, v := range req.config.GetEnvs() {
		m[k] = v
		imagePATH = imagePATH && k != "PATH"
	}
	if imagePATH && req.user.UID == 0 {
		m["PATH"] = rootSafePATH(m["PATH"])
	}
	env := make([]string, 0, len(m))
	for k, v := range m {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("environment variable %q: name must be non-empty without '=' or NUL, value without NUL: %w", k, errBadRequest)
		}
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env, nil
}

// processDir is the request's cwd, else the image's WorkingDir, else Init's
// default workdir, else the user's home, else "/".
func (d *Daemon) processDir(req spawnRequest) (string, error) {
	dir := req.config.GetCwd()
	if dir == "" {
		// The defaults only apply where they exist: a template without
		// /home/user still runs commands.
		_, def := d.ident.defaults()
		for _, def := range []string{d.image.get().WorkingDir, def} {
			if def == "" {
				continue
			}
			if fi, err := os.Stat(def); err == nil && fi.IsDir() {
				return def, nil
			}
		}
		if fi, err := os.Stat(req.user.Home); err == nil && fi.IsDir() {
			return req.user.Home, nil
		}
		return "/", nil
	}
	dir, err := req.user.resolve(dir)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("working directory %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("working directory %s is not a directory: %w", dir, errBadRequest)
	}
	return dir, nil
}

// rootSafePATH keeps the directories of an image's PATH that root may run
// programs from: absolute, existing, and neither they nor a directory above
// them (symlinks resolved) writable by anyone but root, a sticky directory
// above excepted; the checks template builds make of the default PATH
// (catalogue A-8), applied here because the image's PATH is the template
// author's and only root's commands need them. With none left, it is the
// default PATH.
func rootSafePATH(p string) string {
	var keep []string
	for _, dir := range strings.Split(p, ":") {
		if rootOnlyDir(dir) {
			keep = append(keep, dir)
		}
	}
	if len(keep) == 0 {
		return defaultPath
	}
	return strings.Join(keep, ":")
}

func rootOnlyDir(dir string) bool {
	if !path.IsAbs(dir) {
		return false
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false
	}
	for p := real; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil || !fi.IsDir() {
			return false
		}
		sticky := fi.Mode()&os.ModeSticky != 0 && p != real
		if fi.Mode().Perm()&0o022 != 0 && !sticky {
			return false
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 {
			return false
		}
		if p == "/" {
			return true
		}
	}
}

// lookPath finds cmd the way a shell does, with the child's PATH and cwd.
func lookPath(cmd, pathEnv, cwd string) (string, error) {
	if cmd == "" {
		return "", fmt.Errorf("empty command: %w", errBadRequest)
	}
	if strings.ContainsRune(cmd, 0) {
		return "", fmt.Errorf("command %q contains a NUL byte: %w", cmd, errBadRequest)
	}
	if strings.Contains(cmd, "/") {
		if !path.IsAbs(cmd) {
			cmd = path.Join(cwd, cmd)
		}
		if err := executable(cmd); err != nil {
			return "", fmt.Errorf("command %s: %w", cmd, err)
		}
		return cmd, nil
	}
	for _, dir := range strings.Split(pathEnv, ":") {
		if dir == "" {
			dir = "."
		}
		if !path.IsAbs(dir) {
			dir = path.Join(cwd, dir)
		}
		if p := path.Join(dir, cmd); executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q not found in PATH %q: %w", cmd, pathEnv, os.ErrNotExist)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("is a directory: %w", errBadRequest)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("not executable: %w", os.ErrPermission)
	}
	return nil
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v
		}
	}
	return ""
}

// credentialFor switches to u when u is not the daemon's own user. Running as
// itself changes nothing, which also keeps working in a user namespace where
// setgroups is denied. Without root the daemon can only run as itself.
func credentialFor(u account) (*syscall.Credential, error) {
	if uint32(os.Geteuid()) == u.UID && uint32(os.Getegid()) == u.GID {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("run as %s: the daemon is not root: %w", u.Name, os.ErrPermission)
	}
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups, NoSetGroups: false}, nil
}

// errNoStdin reports input for a process that has no such input.
var errNoStdin = errors.New("process has no open stdin")
