package guestd

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"sync"

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
			"start", len(c.StartCommand()) > 0, "ready_port", c.ReadyPort())
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

// startCommand starts the image's Entrypoint+Cmd, unless it runs already,
// with the defaults every command gets; when the image exposes exactly one
// TCP port, Init waits (at most autostartReadyWait) until it listens. A
// start command that cannot start is logged; the sandbox still starts.
func (d *Daemon) startCommand() {
	argv := d.image.get().StartCommand()
	if len(argv) == 0 {
		return
	}
	u, err := d.userNamed("")
	if err != nil {
		d.log.Warn("start command: no user to run it as; not started", "err", err)
		return
	}
	tag := startTag
	p, sub, err := d.spawn(spawnRequest{
		config: &processv1.ProcessConfig{Cmd: argv[0], Args: argv[1:]}, tag: &tag, user: u,
	})
	switch {
	case errors.Is(err, fs.ErrExist):
		d.log.Debug("start command still running")
		return
	case err != nil:
		d.log.Warn("start command not started", "argv", argv, "err", err)
		return
	}
	// Nobody follows its output: with no subscriber it is read and dropped.
	p.unsubscribe(sub)
	d.log.Info("start command started", "argv", argv, "pid", p.pid, "user", u.Name)
	if port := d.image.get().ReadyPort(); port > 0 {
		if err := waitListening(port, p.ended, autostartReadyWait); err != nil {
			d.log.Warn("start command not ready", "port", port, "err", err)
			return
		}
		d.log.Info("start command ready", "port", port)
	}
}
