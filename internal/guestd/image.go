package guestd

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"sync"
	"time"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/internal/template/imagecfg"
)

// The template's image defaults (imagecfg.Path in cfg.ImageRoot: the OCI
// image config's User, Env, WorkingDir, Entrypoint and Cmd) are read at
// every Init. They are defaults under every request: a request's user,
// environment and directory win; Init's platform defaults ("user",
// /home/user) come after the image's. Entrypoint+Cmd is the start command,
// started at Init after the autostart entries, tagged startTag.
//
// The file belongs to the sandbox, so its bytes are hostile: imagecfg.Read
// bounds its size and refuses what is not a regular file, Parse refuses
// what could not be applied, and a file refused is logged and ignored (the
// sandbox starts without image defaults).

// startTag tags the start command in the process list; a running process
// with the tag is what says it runs already.
const startTag = "start"

// imageDefaults holds the image config installed by the last Init.
type imageDefaults struct {
	mu  sync.RWMutex // guards cfg
	cfg imagecfg.Config
}

func (im *imageDefaults) get() imagecfg.Config {
	im.mu.RLock()
	defer im.mu.RUnlock()
	return im.cfg
}

func (im *imageDefaults) set(c imagecfg.Config) {
	im.mu.Lock()
	im.cfg = c
	im.mu.Unlock()
}

// loadImage reads the image defaults; a missing file means none, a bad one
// is logged and ignored.
func (d *Daemon) loadImage() {
	c, err := imagecfg.Read(d.cfg.ImageRoot)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		d.log.Warn("image defaults ignored", "root", d.cfg.ImageRoot, "err", err)
	default:
		if c.User != "" {
			if _, uerr := d.imageUser(); uerr != nil {
				def, _ := d.ident.defaults()
				d.log.Warn("image user not in the sandbox; commands run as the sandbox user", "image_user", c.User, "user", def, "err", uerr)
			}
		}
		d.log.Info("image defaults", "user", c.User, "env", len(c.Env), "workdir", c.WorkingDir,
			"start", len(c.StartCommand()) > 0, "ready_port", c.ReadyPort(), "ready_cmd", c.SpaceReadyCmd != "")
	}
	d.image.set(c)
}

// imageUser resolves the image's User ("name", "uid", "name:group",
// "uid:gid") against the sandbox's account files. A name the files lack is
// an error (the sandbox user is used instead); a uid they lack is that uid.
func (d *Daemon) imageUser() (caller, error) {
	spec := d.image.get()
	if spec.User == "" {
		return caller{}, fmt.Errorf("no image user: %w", errUnknownUser)
	}
	db, err := loadAccounts(d.cfg.PasswdPath, d.cfg.GroupPath)
	if err != nil {
		return caller{}, err
	}
	name, group := spec.UserGroup()
	var u account
	if uid, err := strconv.ParseUint(name, 10, 32); err == nil {
		found := false
		for _, a := range db.users {
			if a.UID == uint32(uid) {
				u, found = a, true
				break
			}
		}
		if !found {
			// As docker run does: a numeric user the image's passwd
			// lacks runs as that uid, group 0 unless the spec names
			// one, HOME=/ and no USER.
			u = account{UID: uint32(uid), Home: "/"}
		}
	} else if u, err = db.lookup(name); err != nil {
		return caller{}, err
	}
	if group != "" {
		gid, err := db.groupID(group)
		if err != nil {
			return caller{}, err
		}
		u.GID = gid
	}
	return caller{account: u, db: db}, nil
}

// groupID finds a group by name or number.
func (db *accountDB) groupID(group string) (uint32, error) {
	if gid, err := strconv.ParseUint(group, 10, 32); err == nil {
		return uint32(gid), nil
	}
	for gid, n := range db.groupName {
		if n == group {
			return gid, nil
		}
	}
	return 0, fmt.Errorf("group %q: %w", group, errUnknownUser)
}

// Stages of a start command that did not get ready (StartNotReady.Stage).
const (
	stageNotStarted   = "not_started"
	stagePortNotReady = "port_not_ready"
	stageReadyFailed  = "ready_failed"
)

// startCommand starts the image's Entrypoint+Cmd, unless it runs already,
// with the defaults every command gets; when the image exposes exactly one
// TCP port, Init waits (at most autostartReadyWait) until it listens. Then,
// when the image has a SpaceReadyCmd, Init runs it until it exits 0 (see
// waitReady). A start command that cannot start, or does not get ready, is
// logged and returned, for Init's answer to carry to the host (which makes
// it a sandbox event); the sandbox still starts. nil: ready, or nothing to
// start.
func (d *Daemon) startCommand() *controlv1.StartNotReady {
	img := d.image.get()
	argv := img.StartCommand()
	if len(argv) == 0 && img.SpaceReadyCmd == "" {
		return nil
	}
	u, err := d.userNamed("")
	if err != nil {
		d.log.Warn("start command: no user to run it as; not started", "err", err)
		return &controlv1.StartNotReady{Stage: stageNotStarted, Detail: "no user to run it as: " + err.Error()}
	}
	if len(argv) > 0 {
		// A port that did not listen is the answer only without a
		// ready command: with one, that command says whether it is ready.
		if nr := d.spawnStart(argv, u, img.ReadyPort()); nr != nil && (nr.Stage == stageNotStarted || img.SpaceReadyCmd == "") {
			return nr
		}
	}
	if img.SpaceReadyCmd == "" {
		return nil
	}
	start := time.Now()
	r := d.waitReady(img.SpaceReadyCmd, u, img.ReadyWait())
	if r.err != nil {
		d.log.Warn("start command not ready: the sandbox starts anyway", "ready_cmd", img.SpaceReadyCmd, "tries", r.tries,
			"err", r.err, "last", r.status, "output", string(r.out))
		stage := stageReadyFailed
		if r.status == "" {
			stage = stageNotStarted
		}
		return &controlv1.StartNotReady{Stage: stage, Detail: r.err.Error(), LastStatus: r.status, OutputTail: r.out, Tries: uint32(r.tries)}
	}
	d.log.Info("start command ready", "ready_cmd", img.SpaceReadyCmd, "tries", r.tries, "after", time.Since(start))
	return nil
}

// spawnStart starts the start command and waits for its ready port, if any;
// nil when it started (it runs already counts) and, with a port, listens.
func (d *Daemon) spawnStart(argv []string, u caller, port int) *controlv1.StartNotReady {
	tag := startTag
	p, sub, err := d.spawn(spawnRequest{
		config: &processv1.ProcessConfig{Cmd: argv[0], Args: argv[1:]}, tag: &tag, user: u,
	})
	switch {
	case errors.Is(err, fs.ErrExist):
		d.log.Debug("start command still running")
		return nil
	case err != nil:
		d.log.Warn("start command not started", "argv", argv, "err", err)
		return &controlv1.StartNotReady{Stage: stageNotStarted, Detail: err.Error()}
	}
	// Nobody follows its output: with no subscriber it is read and dropped.
	p.unsubscribe(sub)
	d.log.Info("start command started", "argv", argv, "pid", p.pid, "user", u.Name)
	if port > 0 {
		if err := waitListening(port, p.ended, autostartReadyWait); err != nil {
			d.log.Warn("start command not ready", "port", port, "err", err)
			return &controlv1.StartNotReady{Stage: stagePortNotReady, Detail: fmt.Sprintf("port %d: %v", port, err)}
		}
		d.log.Info("start command ready", "port", port)
	}
	return nil
}

// Ready command retries: the first pause is readyFirstPause, each next one
// doubles up to readyMaxPause.
const (
	readyFirstPause = 200 * time.Millisecond
	readyMaxPause   = time.Second
	// readyOutputTail is how much of the last try's output Init's answer
	// (and the log) keeps.
	readyOutputTail = 1024
)

// readyResult is how a ready command's tries went.
type readyResult struct {
	tries  int
	status string // the last try's end ("exit status 3"); "" when none ran
	out    []byte // the last try's output tail, at most readyOutputTail
	err    error  // nil when a try exited 0
}

// waitReady runs cmd through /bin/sh -c, as u with the image's environment
// and directory, until it exits 0 or wait passes (a try still running then
// is killed). When none exited 0, the result has an error and the last
// try's exit status and output tail.
func (d *Daemon) waitReady(cmd string, u caller, wait time.Duration) readyResult {
	deadline := time.Now().Add(wait)
	pause := readyFirstPause
	var r readyResult
	for r.tries = 1; ; r.tries++ {
		status, out, err := d.readyTry(cmd, u, deadline)
		if err != nil {
			r.err = fmt.Errorf("ready command not started: %w", err)
			return r
		}
		if status == "exit status 0" {
			return readyResult{tries: r.tries}
		}
		r.status, r.out = status, out
		if left := time.Until(deadline); left > 0 {
			time.Sleep(min(pause, left))
		}
		if !time.Now().Before(deadline) {
			r.err = fmt.Errorf("did not exit 0 within %v", wait)
			return r
		}
		pause = min(2*pause, readyMaxPause)
	}
}

// readyTry runs cmd once, killed at deadline, and returns its end status
// ("exit status N", "signal: killed") and the tail of its output.
func (d *Daemon) readyTry(cmd string, u caller, deadline time.Time) (string, []byte, error) {
	p, sub, err := d.spawn(spawnRequest{
		config: &processv1.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", cmd}}, user: u, deadline: deadline,
	})
	if err != nil {
		return "", nil, err
	}
	var out []byte
	status := "exit status unknown"
	for ev := range sub.ch {
		if data := ev.GetData(); data != nil {
			out = append(out, data.GetStdout()...)
			out = append(out, data.GetStderr()...)
			if len(out) > readyOutputTail {
				out = out[len(out)-readyOutputTail:]
			}
		}
		if end := ev.GetEnd(); end != nil {
			status = end.GetStatus()
		}
	}
	<-p.ended
	return status, bytes.TrimSpace(out), nil
}
