package nodemanager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/keylock"
	"github.com/spacesandbox/space/internal/privop"
	"github.com/spacesandbox/space/internal/progress"
	"github.com/spacesandbox/space/internal/unixsock"
)

// Storage is what the node-manager needs of the node's volume driver.
type Storage interface {
	Name() string
	CreateTemplate(ctx context.Context, name string) (string, error)
	SealTemplate(ctx context.Context, name string) error
	DeleteTemplate(ctx context.Context, name string) error
	Templates(ctx context.Context) ([]string, error)
	Clone(ctx context.Context, template, id string) (string, error)
	Delete(ctx context.Context, id string) error
	Snapshot(ctx context.Context, id, snap string) (string, error)
	CloneSnapshot(ctx context.Context, snap, id string) (string, error)
	DeleteSnapshot(ctx context.Context, snap string) error
	Volumes(ctx context.Context) ([]string, error)
}

// Builder fills dest with a template's root filesystem built from source.
type Builder func(ctx context.Context, source, dest string, progress io.Writer) error

// Config wires a node-manager.
type Config struct {
	// Socket is the unix socket path to serve.
	Socket string
	// AllowedUIDs may call; root (0) always may.
	AllowedUIDs []uint32
	// GuestBinary is the host path of the static space-guest binary.
	GuestBinary string
	Storage     Storage
	Drivers     map[string]driver.Driver
	Build       Builder
	// ImageRuntimes names the runtimes whose root filesystem is a disk image
	// of the template (vm), not a clone of its directory tree.
	ImageRuntimes map[string]bool
	// ImageDir holds the templates' disk images; BuildImage makes one from a
	// template directory that TemplateDir locates.
	ImageDir    string
	BuildImage  ImageBuilder
	TemplateDir func(name string) (string, error)
	// SnapshotDir holds the node's snapshots (see snapshots.go); on the
	// same filesystem as the volumes and the vm state, so copies are
	// reflinks.
	SnapshotDir string
	// SnapshotPath locates the volume snapshot of an ns snapshot.
	SnapshotPath func(id string) (string, error)
}

// Server is a running node-manager.
type Server struct {
	cfg     Config
	log     *slog.Logger
	builds  singleflight.Group
	allowed map[uint32]bool

	// progressEvery is how often a build's caller that asked for progress
	// gets a reading (a second; tests shorten it).
	progressEvery time.Duration
	// buildsMu guards building.
	buildsMu sync.Mutex
	// building holds the tracker of each running build by template name.
	building map[string]*progress.Tracker

	// execs serialises the operations that change one execution (start,
	// cleanup, pause, resume, snapshot, reopening its link): a caller that
	// gives up on a start does not stop it here, and the cleanup it sends
	// next must find the execution whole, not half made (execLock).
	execs keylock.Map

	mu    sync.Mutex        // guards owner, drivers, pending and importing
	owner map[string]string // exec id -> runtime, for executions started by this process
	// importing holds the scratch volumes of the snapshot imports under
	// way (importTree): not leftovers.
	importing map[string]bool
	drivers   map[string]driver.Driver
	// pending names the runtimes being set up (ExpectDriver) that have
	// not joined or failed yet: Hello reports them, so the control plane
	// waits for them rather than placing a create elsewhere.
	pending map[string]bool
	// status is the line Hello reports per runtime (SetRuntimeStatus).
	status map[string]string
}

// NewServer checks cfg and returns a Server.
func NewServer(cfg Config, log *slog.Logger) (*Server, error) {
	if cfg.Socket == "" || cfg.Storage == nil || len(cfg.Drivers) == 0 || cfg.Build == nil {
		return nil, errors.New("node-manager: socket, storage, at least one driver and a template builder are required")
	}
	if _, err := os.Stat(cfg.GuestBinary); err != nil {
		return nil, fmt.Errorf("node-manager: guest binary: %w (build it with `make build`)", err)
	}
	allowed := map[uint32]bool{0: true}
	for _, u := range cfg.AllowedUIDs {
		allowed[u] = true
	}
	drivers := map[string]driver.Driver{}
	for name, d := range cfg.Drivers {
		drivers[name] = d
	}
	return &Server{cfg: cfg, log: log, allowed: allowed, owner: map[string]string{}, drivers: drivers,
		progressEvery: time.Second, building: map[string]*progress.Tracker{}}, nil
}

// AddDriver makes a runtime available, for drivers that take long to set up
// (the vm runtime fetches a kernel) and join after the server started.
func (s *Server) AddDriver(name string, d driver.Driver) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drivers[name] = d
	delete(s.pending, name)
}

// ExpectDriver says that runtime name is being set up and will join with
// AddDriver, or be dropped with DropDriver when its setup fails.
func (s *Server) ExpectDriver(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = map[string]bool{}
	}
	if s.drivers[name] == nil {
		s.pending[name] = true
	}
}

// settingUp reports whether runtime name is expected (ExpectDriver) and
// has not joined or failed yet.
func (s *Server) settingUp(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[name] && s.drivers[name] == nil
}

// DropDriver says that the setup of runtime name failed: it is no longer
// expected.
func (s *Server) DropDriver(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, name)
}

// SetRuntimeStatus sets the line Hello reports for runtime name (what it
// runs on, what is under way); "" removes it. Lines are cut to 200 bytes.
func (s *Server) SetRuntimeStatus(name, line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if line == "" {
		delete(s.status, name)
		return
	}
	if s.status == nil {
		s.status = map[string]string{}
	}
	if len(line) > maxStatusLine {
		line = line[:maxStatusLine]
	}
	s.status[name] = line
}

// maxStatusLine bounds a runtime's status line.
const maxStatusLine = 200

// driver returns the named runtime driver, or nil.
func (s *Server) driver(name string) driver.Driver {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drivers[name]
}

// allDrivers returns every runtime driver.
func (s *Server) allDrivers() map[string]driver.Driver {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]driver.Driver, len(s.drivers))
	for name, d := range s.drivers {
		out[name] = d
	}
	return out
}

// Run serves until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(s.cfg.Socket), 0o755); err != nil {
		return fmt.Errorf("node-manager: socket dir: %w", err)
	}
	_ = os.Remove(s.cfg.Socket)
	ln, err := unixsock.Listen(s.cfg.Socket)
	if err != nil {
		return fmt.Errorf("node-manager: %w", err)
	}
	// The peer check is the gate; the mode lets a non-root node connect at all.
	if err := os.Chmod(s.cfg.Socket, 0o666); err != nil {
		ln.Close()
		return fmt.Errorf("node-manager: chmod socket: %w", err)
	}
	go func() { <-ctx.Done(); ln.Close() }()
	s.log.Info("node-manager listening", "socket", s.cfg.Socket, "storage", s.cfg.Storage.Name())
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				_ = os.Remove(s.cfg.Socket)
				return nil
			}
			return fmt.Errorf("node-manager: accept: %w", err)
		}
		c, ok := conn.(*net.UnixConn)
		if !ok {
			conn.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(ctx, c)
		}()
	}
}

func (s *Server) serveConn(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	uid, err := peerUID(c)
	if err != nil || !s.allowed[uid] {
		s.log.Warn("node-manager: refused caller", "uid", uid, "err", err)
		_ = privop.WriteMessage(c, privop.ErrorResponse(fmt.Errorf("%w: caller not allowed", errdefs.ErrPermissionDenied)))
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var req privop.Request
	fs, err := privop.ReadMessage(c, &req)
	privop.CloseFiles(fs) // requests carry no descriptors
	if err != nil {
		_ = privop.WriteMessage(c, privop.ErrorResponse(fmt.Errorf("%w: bad request: %v", errdefs.ErrInvalidArgument, err)))
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if req.Op == privop.OpEnsureTemplate && req.Template != nil && req.Template.Progress {
		s.serveBuild(ctx, c, uid, &req)
		return
	}
	resp, files := s.handle(ctx, uid, &req)
	defer privop.CloseFiles(files)
	var fds []int
	for _, f := range files {
		fds = append(fds, int(f.Fd()))
	}
	if err := privop.WriteMessage(c, resp, fds...); err != nil {
		s.log.Warn("node-manager: write response", "op", req.Op, "err", err)
	}
}

func (s *Server) handle(ctx context.Context, uid uint32, req *privop.Request) (privop.Response, []*os.File) {
	if id := execOf(req); id != "" {
		defer s.execs.Lock(id)()
	}
	var resp privop.Response
	var file *os.File
	var err error
	switch req.Op {
	case privop.OpHello:
		resp.Hello = s.hello()
	case privop.OpEnsureTemplate:
		resp.Template, err = s.ensureTemplate(ctx, uid, req.Template)
	case privop.OpDeleteTemplate:
		err = s.deleteTemplate(ctx, req.Template)
	case privop.OpListTemplates:
		resp.Templates, err = s.cfg.Storage.Templates(ctx)
	case privop.OpStart:
		var files []*os.File
		resp.Started, files, err = s.start(ctx, req.Start)
		if err == nil {
			return resp, files
		}
	case privop.OpCleanup:
		err = s.cleanup(ctx, req.ExecID, req.Runtime)
	case privop.OpPause, privop.OpResume:
		err = s.pauseResume(ctx, req.Op, req.ExecID, req.Runtime)
	case privop.OpStats:
		resp.Stats, err = s.stats(ctx, req.ExecID, req.Runtime)
	case privop.OpSnapshot:
		resp.Snapshot, err = s.snapshot(ctx, req.Snapshot)
	case privop.OpDeleteSnapshot:
		err = s.deleteSnapshot(ctx, req.SnapshotID)
	case privop.OpListSnapshots:
		resp.Snapshots, err = s.listSnapshots()
	case privop.OpExport:
		resp.Export, err = s.exportSnapshot(ctx, req.Export)
	case privop.OpOpenExport:
		file, err = s.openExportFile(req.Export)
	case privop.OpCreateImport:
		file, err = s.createImportFile(req.Export)
	case privop.OpSealImport:
		resp.Snapshot, err = s.sealImport(ctx, req.Export)
	case privop.OpReopenLink:
		var link *driver.Link
		if link, err = s.reopenLink(ctx, req.ExecID, req.Runtime); err == nil {
			resp.Started = &privop.Started{Link: string(link.Framing)}
			file = link.File
		}
	case privop.OpListExecutions:
		resp.Executions, err = s.listExecutions(ctx)
	case privop.OpAlive:
		var alive bool
		alive, err = s.alive(ctx, req.ExecID, req.Runtime)
		resp.Alive = &alive
	default:
		err = invalid("unknown operation %q", req.Op)
	}
	if err != nil {
		s.log.Warn("node-manager: operation failed", "op", req.Op, "err", err)
		return privop.ErrorResponse(err), nil
	}
	if file != nil {
		return resp, []*os.File{file}
	}
	return resp, nil
}

// execOf is the execution an operation changes, "" for the others (reads
// such as stats and alive, and operations on templates and snapshots by
// id, need no order against them).
func execOf(req *privop.Request) string {
	switch req.Op {
	case privop.OpStart:
		if req.Start != nil {
			return req.Start.ExecID
		}
	case privop.OpCleanup, privop.OpPause, privop.OpResume, privop.OpReopenLink:
		return req.ExecID
	case privop.OpSnapshot:
		if req.Snapshot != nil {
			return req.Snapshot.ExecID
		}
	}
	return ""
}

func (s *Server) hello() *privop.Hello {
	h := &privop.Hello{Pid: os.Getpid(), Storage: s.cfg.Storage.Name()}
	for name := range s.allDrivers() {
		h.Runtimes = append(h.Runtimes, name)
	}
	sort.Strings(h.Runtimes)
	s.mu.Lock()
	for name := range s.pending {
		h.Pending = append(h.Pending, name)
	}
	if len(s.status) > 0 {
		h.Status = maps.Clone(s.status)
	}
	s.mu.Unlock()
	sort.Strings(h.Pending)
	return h
}

func (s *Server) runtimes() map[string]bool {
	m := map[string]bool{}
	for name := range s.allDrivers() {
		m[name] = true
	}
	return m
}

func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, credErr
	}
	return cred.Uid, nil
}
