package guestd

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
)

// DefaultAutostartDir holds a template's services: every executable regular
// file in it is started when the sandbox's identity is installed (Init: at
// start, and again at later activations, which start only the entries no
// longer running), as the sandbox's user. The code-interpreter template
// starts its server from there.
const DefaultAutostartDir = "/etc/space/autostart.d"

// An entry may say, in a line of its first KiB, which TCP port it listens
// on once ready:
//
//	# space-ready-port: 49999
//
// Init then waits, at most autostartReadyWait, until 127.0.0.1:PORT accepts
// a connection (or the entry exits), so that a sandbox reported running
// already answers there. An entry whose server takes longer to listen (a
// Jupyter kernel under emulation) may say how long to wait, in seconds, up
// to maxAutostartReadyWait:
//
//	# space-ready-wait: 60
const (
	readyPortPrefix       = "# space-ready-port:"
	readyWaitPrefix       = "# space-ready-wait:"
	autostartReadyWait    = 10 * time.Second
	maxAutostartReadyWait = 60 * time.Second
)

// autostartUser is who runs the entries when Init names no default user:
// the templates' (and E2B's) "user". Entries never run as root by default.
const autostartUser = "user"

// autostart starts the entries of cfg.AutostartDir that are not running, in
// name order, each as a process of the daemon tagged "autostart:NAME"
// (commands.list shows it; the tag is what says it runs already),
// with the user's home as its directory and Init's environment. Output is
// not kept: an entry logs where it likes. A missing directory is no error;
// an entry that cannot start is logged and the others still start.
func (d *Daemon) autostart() {
	entries, err := os.ReadDir(d.cfg.AutostartDir)
	if err != nil {
		if !os.IsNotExist(err) {
			d.log.Warn("autostart: read the directory", "dir", d.cfg.AutostartDir, "err", err)
		}
		return
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return
	}
	name, _ := d.ident.defaults()
	if name == "" {
		name = autostartUser
	}
	u, err := d.userNamed(name)
	if err != nil || u.Name != name {
		d.log.Warn("autostart: no account to run the entries as; none started", "user", name, "err", err)
		return
	}
	sort.Strings(names)
	for _, n := range names {
		err := d.autostartOne(n, u)
		switch {
		case errors.Is(err, os.ErrExist):
			d.log.Debug("autostart: entry still running", "entry", n)
		case err != nil:
			d.log.Warn("autostart: entry not started", "entry", n, "err", err)
		}
	}
}

func (d *Daemon) autostartOne(name string, u caller) error {
	path := filepath.Join(d.cfg.AutostartDir, name)
	tag := "autostart:" + name
	p, sub, err := d.spawn(spawnRequest{
		config: &processv1.ProcessConfig{Cmd: path}, tag: &tag, user: u,
	})
	if err != nil {
		return err
	}
	// Nobody follows its output: with no subscriber it is read and dropped.
	p.unsubscribe(sub)
	d.log.Info("autostart: started", "entry", name, "pid", p.pid, "user", u.Name)
	head := make([]byte, 1024)
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	n, _ := io.ReadFull(f, head)
	f.Close()
	if port := readyPort(head[:n]); port > 0 {
		start := time.Now()
		if err := waitListening(port, p.ended, readyWait(head[:n])); err != nil {
			return fmt.Errorf("entry %s: %w", name, err)
		}
		d.log.Info("autostart: ready", "entry", name, "port", port, "after", time.Since(start))
	}
	return nil
}

// readyPort finds the "# space-ready-port: N" line of an entry's head; 0
// when there is none or it is not a port number.
func readyPort(head []byte) int {
	port, ok := headerNumber(head, readyPortPrefix)
	if !ok || port < 1 || port > 65535 {
		return 0
	}
	return port
}

// readyWait is how long Init waits for an entry's ready port: its
// "# space-ready-wait: SECONDS" line (1 to maxAutostartReadyWait), else
// autostartReadyWait.
func readyWait(head []byte) time.Duration {
	secs, ok := headerNumber(head, readyWaitPrefix)
	if !ok || secs < 1 || time.Duration(secs)*time.Second > maxAutostartReadyWait {
		return autostartReadyWait
	}
	return time.Duration(secs) * time.Second
}

// headerNumber reads the number of the first line of head that starts with
// prefix (after spaces); ok is false when there is none or it is not a
// decimal number.
func headerNumber(head []byte, prefix string) (n int, ok bool) {
	for _, line := range strings.Split(string(head), "\n") {
		v, found := strings.CutPrefix(strings.TrimSpace(line), prefix)
		if !found {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		return n, err == nil
	}
	return 0, false
}

// waitListening waits until 127.0.0.1:port accepts a connection, ended is
// closed (the entry exited) or wait passes.
func waitListening(port int, ended <-chan struct{}, wait time.Duration) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(wait)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ended:
			return fmt.Errorf("exited before listening on port %d", port)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on port %d after %v: %w", port, wait, err)
		}
	}
}
