// Package pgtest runs real PostgreSQL servers for tests, from the binaries of
// the Debian postgresql package (/usr/lib/postgresql/VERSION/bin; scripts/deps.sh
// installs it for `make test`).
//
// A package that needs many databases shares one server and takes a fresh
// database per test, which costs a CREATE DATABASE instead of an initdb:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestX(t *testing.T) {
//		url := pgtest.Database(t) // dropped when the test ends
//		...
//	}
//
// A test that must stop or break its server starts its own with Start.
//
// Servers run on a fresh directory under os.TempDir() with fsync off (the
// operating system's cache survives the server: only a host crash would lose
// data) but commits written to the WAL before they are acknowledged, as in
// production, so a server killed and restarted (Restart) keeps every
// committed transaction; and with small buffers. They listen on a Unix
// socket in that directory and on 127.0.0.1 at a free port, trust every local
// connection, and are stopped (immediate shutdown, then SIGKILL of their
// process group) and their directory removed at cleanup.
// PostgreSQL refuses to run as root, so under root the server runs as the
// `postgres` user the Debian package creates (or `nobody`).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spacesandbox/space/internal/pinnedproc"
)

// SuperUser is the superuser role of the servers pgtest starts; every local
// connection is trusted, so it has no password.
const SuperUser = "space"

const (
	startTimeout = 60 * time.Second
	stopTimeout  = 10 * time.Second
	startTries   = 3
)

// ErrNoPostgres means no PostgreSQL server binaries were found.
var ErrNoPostgres = errors.New("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin (Debian package postgresql)")

// Server is a running PostgreSQL server owned by a test.
type Server struct {
	// Dir holds the data directory, the socket and the server log.
	Dir string
	// Port is the TCP port on 127.0.0.1 (also the Unix socket's number).
	Port int

	// bin, cred and logPath start the server again (Restart).
	bin     string
	cred    *syscall.Credential
	logPath string

	mu     sync.Mutex // guards cmd and exited across a Restart
	cmd    *exec.Cmd
	exited <-chan struct{} // closed when cmd has been waited for

	stopOnce sync.Once
	stopErr  error
}

// URL returns a postgres:// URL of database db on the server's Unix socket.
func (s *Server) URL(db string) string {
	q := url.Values{"host": {s.Dir}, "port": {strconv.Itoa(s.Port)}, "sslmode": {"disable"}}
	return (&url.URL{Scheme: "postgres", User: url.User(SuperUser), Path: "/" + db, RawQuery: q.Encode()}).String()
}

// TCPURL returns a postgres:// URL of database db over TCP on 127.0.0.1.
func (s *Server) TCPURL(db string) string {
	return (&url.URL{Scheme: "postgres", User: url.User(SuperUser), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)),
		Path: "/" + db, RawQuery: "sslmode=disable"}).String()
}

// Start starts a server of its own for t and stops it when t ends. It skips
// t when PostgreSQL is not installed and the test does not run as root; as
// root (as CI runs) a missing server is a failure.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := StartServer()
	if err != nil {
		skipOrFatal(t, err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("pgtest: stop server: %v", err)
		}
	})
	return s
}

func skipOrFatal(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoPostgres) && os.Geteuid() != 0 {
		t.Skipf("pgtest: %v; install it with `make deps-test` as root", err)
	}
	if errors.Is(err, ErrNoPostgres) {
		t.Fatalf("pgtest: %v; `make deps-test` installs it", err)
	}
	t.Fatalf("pgtest: %v", err)
}

// StartServer starts a server; the caller must Stop it. Tests use Start or
// Database instead.
func StartServer() (*Server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	parent := os.TempDir()
	if cred != nil && !traversable(parent) {
		// The server's user could not reach a directory under $TMPDIR.
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, "space-pgtest-")
	if err != nil {
		return nil, fmt.Errorf("make server directory: %w", err)
	}
	s, err := start(bin, dir, cred)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func start(bin, dir string, cred *syscall.Credential) (*Server, error) {
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("hand %s to uid %d: %w", dir, cred.Uid, err)
		}
	}
	logPath := filepath.Join(dir, "postgres.log")
	data := filepath.Join(dir, "data")
	if err := run(dir, cred, logPath, filepath.Join(bin, "initdb"), "-D", data, "-U", SuperUser,
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, fmt.Errorf("initdb: %w%s", err, logTail(logPath))
	}
	var lastErr error
	for range startTries { // a free port may be taken between the probe and the bind
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err := startPostgres(bin, dir, data, port, cred, logPath)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startPostgres(bin, dir, data string, port int, cred *syscall.Credential, logPath string) (*Server, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "shared_buffers=16MB", "-c", "max_connections=200", "-c", "max_wal_size=256MB",
		"-c", "log_min_messages=warning", "-c", "log_min_error_statement=panic",
		"-c", "unix_socket_permissions=0777")
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env(dir), logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
	child, err := pinnedproc.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	s := &Server{Dir: dir, Port: port, cmd: cmd, exited: child.Done(), bin: bin, cred: cred, logPath: logPath}
	if err := s.waitReady(); err != nil {
		s.kill()
		return nil, fmt.Errorf("%w%s", err, logTail(logPath))
	}
	return s, nil
}

// waitReady waits until the server takes connections or exits.
func (s *Server) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			return c.Close(ctx)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("postgres exited at start (%v)", s.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("postgres not ready after %v: %w", startTimeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop shuts the server down at once (no checkpoint: the data is thrown
// away) and removes its directory. It may be called more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.cmd.Process.Signal(syscall.SIGQUIT) // immediate shutdown
		select {
		case <-s.exited:
		case <-time.After(stopTimeout):
		}
		s.kill()
		s.stopErr = os.RemoveAll(s.Dir)
	})
	return s.stopErr
}

// kill kills the server's whole process group and waits for the postmaster.
func (s *Server) kill() {
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
}

// CreateDatabase creates an empty database with a fresh random name and
// returns the name.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	var b [8]byte
	rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	return name, s.admin(ctx, `CREATE DATABASE `+name)
}

// DropDatabase drops database name, closing its open connections.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	return s.admin(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`)
}

func (s *Server) admin(ctx context.Context, stmt string) error {
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to the test server: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	return nil
}

// NewDatabase creates a fresh database for t, dropped when t ends, and
// returns its URL.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	name, err := s.CreateDatabase(ctx)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := s.DropDatabase(ctx, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s.URL(name)
}

// findBin returns the bin directory of the newest PostgreSQL installed.
func findBin() (string, error) {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	var best string
	bestVer := -1
	for _, p := range found {
		bin := filepath.Dir(p)
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
		if err != nil || v <= bestVer {
			continue
		}
		if _, err := os.Stat(filepath.Join(bin, "initdb")); err == nil {
			best, bestVer = bin, v
		}
	}
	if best == "" {
		return "", ErrNoPostgres
	}
	return best, nil
}

// runAs returns the credentials the server runs with: none (the current
// user) unless running as root, which PostgreSQL refuses.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root and neither user postgres nor nobody exists to run PostgreSQL as")
}

// env is the environment of the server's processes: nothing of the test's
// (a PGDATA or PGPORT there must not leak in).
func env(dir string) []string {
	return []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "LANG=C", "HOME=" + dir}
}

func run(dir string, cred *syscall.Credential, logPath, name string, args ...string) error {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env(dir), logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
	// Pinned: other tests end threads they moved into another namespace,
	// and the parent-death signal follows the thread that forked.
	if err := pinnedproc.Run(cmd); err != nil {
		if cmd.ProcessState == nil {
			return err
		}
		return errors.New(cmd.ProcessState.String())
	}
	return nil
}

// traversable reports whether every user may pass through dir and its
// parents.
func traversable(dir string) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// logTail returns the end of the server log, for an error message.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "\nserver log:\n" + strings.Join(lines, "\n")
}
