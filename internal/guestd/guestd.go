// Package guestd is the guest daemon: the services space-guest serves inside a
// sandbox over the one byte stream that leads to the host bridge.
//
// The stream carries HTTP/2 cleartext with prior knowledge. On it the daemon
// serves E2B envd-compatible Connect services (process.Process,
// filesystem.Filesystem), the raw /files endpoint, /health and /envs, and the
// control service space.guest.v1.Control that only the host bridge calls.
package guestd

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	"github.com/spacesandbox/space/api/guest/v1/control/controlv1connect"
	"github.com/spacesandbox/space/api/guest/v1/filesystem/filesystemv1connect"
	"github.com/spacesandbox/space/api/guest/v1/process/processv1connect"
)

// Version is the daemon's semantic version. E2B SDKs gate features on the
// guest's envdVersion; 0.7.0 is above every gate they check (0.6.4 is the last).
const Version = "0.7.0"

// Config tunes the daemon. The zero value is usable: every limit has a default.
type Config struct {
	// ReapAll makes the daemon reap every child, as PID 1 must.
	ReapAll bool
	// PrepareWorkload makes the workload cgroup at start (a VM's init, with
	// ReapAll): see prepareWorkload.
	PrepareWorkload bool
	// WorkloadTasks and DaemonTasks are the tasks files of the workload's
	// cgroup and of the daemon's, one per cgroup v1 hierarchy, in the same
	// order: every process the daemon starts is forked by one thread
	// moved into the workload's groups once and kept there (the ns
	// runtime's reserve, see forkInWorkload); DaemonTasks takes it back if
	// it entered only some of them. Empty: processes start in the daemon's groups, or
	// in the workload group PrepareWorkload made.
	WorkloadTasks, DaemonTasks []*os.File
	// PasswdPath and GroupPath name the account files (default /etc/passwd, /etc/group).
	PasswdPath string
	GroupPath  string
	// MaxConcurrentStreams bounds the HTTP/2 streams the host may open (default 256).
	MaxConcurrentStreams uint32
	// MaxMessageBytes bounds one RPC message in either direction (default 16 MiB).
	MaxMessageBytes int
	// MaxProcesses bounds the processes started through the daemon that still run (default 1024).
	MaxProcesses int
	// MaxWatchers bounds the directory watchers (default 64).
	MaxWatchers int
	// MaxWatches bounds the inotify watches (one per watched directory) of
	// all the watchers together (default 32,768; watch.go).
	MaxWatches int
	// AutostartDir holds the executables started at Init
	// (default DefaultAutostartDir; see autostart.go).
	AutostartDir string
	// ImageRoot is the tree whose imagecfg.Path holds the template's image
	// defaults, read at Init (default "/"; see image.go).
	ImageRoot string
}

func (c Config) withDefaults() Config {
	if c.PasswdPath == "" {
		c.PasswdPath = "/etc/passwd"
	}
	if c.GroupPath == "" {
		c.GroupPath = "/etc/group"
	}
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = 256
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = 16 << 20
	}
	if c.MaxProcesses == 0 {
		c.MaxProcesses = 1024
	}
	if c.AutostartDir == "" {
		c.AutostartDir = DefaultAutostartDir
	}
	if c.ImageRoot == "" {
		c.ImageRoot = "/"
	}
	if c.MaxWatchers == 0 {
		c.MaxWatchers = 64
	}
	if c.MaxWatches == 0 {
		c.MaxWatches = defaultMaxWatches
	}
	return c
}

// Daemon holds the state that outlives one connection: the process table,
// the watchers, the installed identity and the reaper.
type Daemon struct {
	cfg      Config
	log      *slog.Logger
	started  time.Time
	reaper   *reaper
	procs    *processTable
	watchers *watcherTable
	ident    identity
	image    imageDefaults
	handler  http.Handler

	lastActivity atomic.Int64 // unix nanoseconds
	workload     workload
	forkerOnce   sync.Once        // starts runForker
	forks        chan forkRequest // to runForker
	closed       chan struct{}    // closed by Close
	closeOnce    sync.Once

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// New builds a daemon and starts its reaper; Close stops it.
func New(cfg Config, log *slog.Logger) *Daemon {
	cfg = cfg.withDefaults()
	d := &Daemon{cfg: cfg, log: log, started: time.Now(), workload: workload{fd: -1}, closed: make(chan struct{})}
	d.reaper = newReaper(cfg.ReapAll, log)
	if cfg.ReapAll && cfg.PrepareWorkload {
		if err := d.prepareWorkload(); err != nil {
			// Init tries again, and reports why if it fails.
			log.Warn("workload cgroup not prepared at start", "err", err)
		}
	}
	d.procs = newProcessTable(cfg.MaxProcesses)
	d.watchers = newWatcherTable(cfg.MaxWatchers, cfg.MaxWatches)
	d.touch()
	d.handler = d.routes()

	ctx, cancel := context.WithCancel(context.Background())
	d.stop = cancel
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.reaper.run(ctx)
	}()
	return d
}

// Serve serves one channel with a fresh daemon and returns when the stream
// ends or ctx is done; the processes it started are killed on return.
func Serve(ctx context.Context, conn net.Conn, cfg Config, log *slog.Logger) error {
	d := New(cfg, log)
	defer d.Close()
	return d.ServeConn(ctx, conn)
}

// ServeConn serves HTTP/2 with prior knowledge on conn until the stream ends or
// ctx is done. It closes conn. Processes keep running after it returns.
func (d *Daemon) ServeConn(ctx context.Context, conn net.Conn) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	setSocketBuffers(conn)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	srv := &http2.Server{
		MaxConcurrentStreams:         d.cfg.MaxConcurrentStreams,
		MaxReadFrameSize:             1 << 20,
		MaxUploadBufferPerConnection: 16 << 20,
		MaxUploadBufferPerStream:     4 << 20,
	}
	d.log.Info("serving guest channel", "version", Version)
	srv.ServeConn(conn, &http2.ServeConnOpts{
		Context:    ctx,
		Handler:    d.handler,
		BaseConfig: &http.Server{MaxHeaderBytes: 1 << 20},
	})
	conn.Close()
	if err := ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	d.log.Info("guest channel closed")
	return nil
}

// Close kills the daemon's processes, removes its watchers and stops the reaper.
func (d *Daemon) Close() error {
	d.procs.killAll()
	d.watchers.closeAll()
	d.closeOnce.Do(func() { close(d.closed) })
	d.stop()
	d.wg.Wait()
	return nil
}

func (d *Daemon) routes() http.Handler {
	opts := connect.WithHandlerOptions(
		connect.WithReadMaxBytes(d.cfg.MaxMessageBytes),
		connect.WithSendMaxBytes(d.cfg.MaxMessageBytes),
	)
	mux := http.NewServeMux()
	mux.Handle(processv1connect.NewProcessHandler(&processService{d: d}, opts))
	mux.Handle(filesystemv1connect.NewFilesystemHandler(&filesystemService{d: d}, opts))
	controlPath, control := controlv1connect.NewControlHandler(&controlService{d: d}, opts)
	mux.Handle(controlPath, control)
	mux.HandleFunc("GET /files", d.getFile)
	mux.HandleFunc("POST /files", d.postFile)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /envs", d.getEnvs)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.URL.Path) < len(controlPath) || r.URL.Path[:len(controlPath)] != controlPath {
			d.touch()
		}
		mux.ServeHTTP(w, r)
	})
}

// touch records activity now.
func (d *Daemon) touch() { d.lastActivity.Store(time.Now().UnixNano()) }

func (d *Daemon) getEnvs(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(d.ident.envVars())
}

// identity is what Init installs: the execution identity and the defaults
// for processes and files.
type identity struct {
	mu             sync.RWMutex // guards every field below
	sandboxID      string
	generation     uint64
	activationID   string
	env            map[string]string
	defaultUser    string
	defaultWorkdir string
	accessToken    string
}

func (id *identity) envVars() map[string]string {
	id.mu.RLock()
	defer id.mu.RUnlock()
	out := make(map[string]string, len(id.env))
	for k, v := range id.env {
		out[k] = v
	}
	return out
}

func (id *identity) defaults() (user, workdir string) {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return id.defaultUser, id.defaultWorkdir
}

// socketBufferSize is the kernel buffer asked for on the channel when it is
// a socket (ns: a socketpair). With the default (~208 KiB) a file's 256 KiB
// writes block halfway and the daemon and the host bridge hand the CPU back
// and forth for every chunk. The kernel caps it at net.core.wmem_max.
const socketBufferSize = 1 << 20

func setSocketBuffers(c net.Conn) {
	type buffered interface {
		SetReadBuffer(int) error
		SetWriteBuffer(int) error
	}
	if s, ok := c.(buffered); ok {
		_ = s.SetReadBuffer(socketBufferSize)
		_ = s.SetWriteBuffer(socketBufferSize)
	}
}
