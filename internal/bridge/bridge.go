// Package bridge is the host bridge: one process per sandbox execution that owns
// the guest channel and serves the sandbox manager on a per-execution unix socket.
//
// The bridge is the only client of the guest daemon. It forwards the guest's public
// routes (process, filesystem, raw files, health, envs) to the manager and keeps the
// guest's control service to itself: the manager reaches it only through the
// bridge's own /bridge/v1 endpoints. When the guest channel ends the bridge does
// not reconnect: it records why, answers status with that reason, and exits.
package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/guest"
	"github.com/spacesandbox/space/internal/guesttext"
	"github.com/spacesandbox/space/internal/unixsock"
)

// Config is what one bridge needs to serve one execution.
type Config struct {
	// ExecID names the execution the bridge serves.
	ExecID string
	// Socket is the unix socket path the manager connects to.
	Socket string
	// Channel is the host end of the guest byte stream.
	Channel net.Conn
	// ExitFile receives the reason the bridge stopped, for the manager to read
	// after the bridge is gone.
	ExitFile string
	// ErrorsFile receives the guest's protocol errors by kind (JSON, see
	// ProtocolErrorsFile) when the bridge stops after any; "" writes none.
	ErrorsFile string
	// ReadyTimeout bounds the wait for the guest daemon's first answer.
	ReadyTimeout time.Duration
	// Guest is the process the channel must be connected to (the VMM of a
	// vm execution); New refuses a channel whose peer is another. Nil
	// when the channel is a socketpair made by the node-manager (ns), whose
	// peer credentials name its creator and which no other process can
	// reach (peer.go).
	Guest *Process
	// Dir is the execution's directory ("" is not watched). When it is
	// removed (the node's data directory was deleted) the bridge stops and
	// closes the guest channel, which ends an ns sandbox's PID 1.
	Dir string
	// DirCheckEvery is how often Dir is checked (DefaultDirCheckEvery).
	DirCheckEvery time.Duration
	// MaxStreams bounds the guest requests in flight at once (0:
	// DefaultMaxStreams); one more is refused 429 too_many_streams.
	MaxStreams int
}

// DefaultMaxStreams is how many guest requests (process streams, watches,
// file transfers) one execution's bridge carries at once. Each costs the
// bridge and the node a goroutine and buffers, and the guest — hostile,
// perhaps — need not enforce caps of its own, so the host holds this one: a
// client opening ten thousand watches gets refusals, not the node's memory.
const DefaultMaxStreams = 1024

// publicPrefixes are the guest routes forwarded to the manager. The control
// service is deliberately absent.
var publicPrefixes = []string{
	"/process.Process/",
	"/filesystem.Filesystem/",
}

// publicPaths are exact guest paths forwarded to the manager.
var publicPaths = map[string]bool{
	"/files":  true,
	"/health": true,
	"/envs":   true,
}

// IsPublicGuestPath reports whether path is a guest route that the manager (and,
// through it, an authorised client) may reach.
func IsPublicGuestPath(path string) bool {
	if publicPaths[path] {
		return true
	}
	for _, p := range publicPrefixes {
		if strings.HasPrefix(path, p) && len(path) > len(p) && !strings.Contains(path[len(p):], "/") {
			return true
		}
	}
	return false
}

// Bridge serves one execution.
type Bridge struct {
	cfg    Config
	log    *slog.Logger
	client *guest.Client
	dir    *os.File // cfg.Dir, open; nil when not watched

	mu      sync.Mutex // guards ready, version, reason, thawTimer
	ready   bool
	version string
	reason  string
	// adm admits public guest requests by their capability.
	adm admission
	// prefetched is the guest's bundle read for the next trust (trust.go).
	prefetched prefetchedBundle
	// streams holds a token per guest request in flight (Config.MaxStreams).
	streams chan struct{}

	// thawTimer thaws the guest's filesystem if the manager froze it and
	// never thawed it (it crashed in between): a sandbox is never left
	// frozen for longer than FreezeLimit.
	thawTimer *time.Timer
}

// New verifies the peer of cfg.Channel (when cfg.Guest is set) and connects to
// the guest over it. It does not wait for the guest. A channel whose peer is
// not cfg.Guest is refused before anything is written to it: New writes the
// reason to cfg.ExitFile and returns an ErrPermissionDenied error.
func New(cfg Config, log *slog.Logger) (*Bridge, error) {
	if cfg.ExecID == "" || cfg.Socket == "" || cfg.Channel == nil {
		return nil, errors.New("bridge: exec id, socket and channel are required")
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	log = log.With("exec", cfg.ExecID)
	if cfg.Guest != nil {
		if err := VerifyChannel(cfg.Channel, *cfg.Guest); err != nil {
			reason := refuseChannel(cfg, err)
			log.Error("refusing to serve the guest channel", "reason", reason, "want_pid", cfg.Guest.Pid, "want_start_time", cfg.Guest.StartTime)
			return nil, fmt.Errorf("bridge %s: %w", cfg.ExecID, err)
		}
		log.Debug("guest channel verified", "vmm_pid", cfg.Guest.Pid, "vmm_start_time", cfg.Guest.StartTime)
	}
	if cfg.DirCheckEvery <= 0 {
		cfg.DirCheckEvery = DefaultDirCheckEvery
	}
	var dir *os.File
	if cfg.Dir != "" {
		var err error
		if dir, err = openDir(cfg.Dir); err != nil {
			return nil, fmt.Errorf("bridge %s: %w", cfg.ExecID, err)
		}
	}
	SetSocketBuffers(cfg.Channel)
	c, err := guest.NewClient(cfg.Channel)
	if err != nil {
		if dir != nil {
			dir.Close()
		}
		return nil, fmt.Errorf("bridge %s: guest channel: %w", cfg.ExecID, err)
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	return &Bridge{cfg: cfg, log: log, client: c, dir: dir, adm: admission{now: time.Now}, streams: make(chan struct{}, cfg.MaxStreams)}, nil
}

// Run waits for the guest, serves the manager until ctx is done, the guest
// channel ends, or the manager asks the bridge to stop.
func (b *Bridge) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer b.client.Close()

	ln, err := listenUnix(b.cfg.Socket)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: b.handler(cancel), ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(BufferedListener{ln}) }()

	go b.waitReady(ctx)
	dirGone := watchDir(ctx, b.dir, b.cfg.DirCheckEvery)
	if b.dir != nil {
		defer b.dir.Close()
	}

	var reason string
	select {
	case <-dirGone:
		reason = "execution directory removed: its data is gone, the execution stops"
	case <-ctx.Done():
		reason = "stopped: " + context.Cause(ctx).Error()
	case <-b.client.Done():
		reason = "guest channel closed"
		if err := b.client.Err(); err != nil {
			// The guest broke the protocol: the reason says how, and the
			// sandbox's event (which carries the reason) names it.
			reason += ": " + err.Error()
		}
	case err := <-serveErr:
		reason = fmt.Sprintf("manager socket failed: %v", err)
	}
	b.setReason(reason)
	b.log.Info("bridge stopping", "reason", reason)
	b.writeProtocolErrors()
	if b.cfg.ExitFile != "" {
		if err := os.WriteFile(b.cfg.ExitFile, []byte(reason+"\n"), 0o600); err != nil {
			b.log.Warn("write exit file", "err", err)
		}
	}
	shutdownCtx, done := context.WithTimeout(context.Background(), 2*time.Second)
	defer done()
	_ = srv.Shutdown(shutdownCtx)
	_ = os.Remove(b.cfg.Socket)
	return nil
}

// waitReady polls the guest's control service until it answers or the ready
// timeout passes.
func (b *Bridge) waitReady(ctx context.Context) {
	deadline := time.Now().Add(b.cfg.ReadyTimeout)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := b.client.Control().Ready(rctx, connect.NewRequest(&controlv1.ReadyRequest{}))
		cancel()
		if err == nil {
			b.mu.Lock()
			b.ready, b.version = true, resp.Msg.GetVersion()
			b.mu.Unlock()
			b.log.Info("guest ready", "version", resp.Msg.GetVersion())
			failpoint.BridgeAfterReady.Hit()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-b.client.Done():
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
	if ctx.Err() == nil {
		b.setReason(fmt.Sprintf("guest did not answer within %s", b.cfg.ReadyTimeout))
	}
}

func (b *Bridge) setReason(r string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reason == "" {
		b.reason = r
	}
}

// Status is the body of GET /bridge/v1/status.
type Status struct {
	ExecID       string `json:"exec_id"`
	Pid          int    `json:"pid"`
	Ready        bool   `json:"ready"`
	GuestVersion string `json:"guest_version,omitempty"`
	// Reason is set once the bridge knows the execution cannot be served.
	Reason string `json:"reason,omitempty"`
}

func (b *Bridge) status() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Status{ExecID: b.cfg.ExecID, Pid: os.Getpid(), Ready: b.ready, GuestVersion: b.version, Reason: b.reason}
}

func (b *Bridge) handler(stop context.CancelCauseFunc) http.Handler {
	target, _ := url.Parse("http://guest")
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = "guest"
		},
		Transport:     b.client.HTTPClient().Transport,
		FlushInterval: -1,
		BufferPool:    ProxyBuffers,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeJSONError(w, http.StatusBadGateway, "guest unreachable: "+err.Error())
		},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /bridge/v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, b.status())
	})
	mux.HandleFunc("POST /bridge/v1/init", b.handleInit)
	mux.HandleFunc("GET /bridge/v1/activity", b.handleActivity)
	mux.HandleFunc("POST /bridge/v1/freeze", b.handleFreeze)
	mux.HandleFunc("POST /bridge/v1/keys", b.handleKeys)
	mux.HandleFunc("POST /bridge/v1/clock", b.handleClock)
	mux.HandleFunc("POST /bridge/v1/retire", b.handleRetire)
	mux.HandleFunc("POST /bridge/v1/thaw", b.handleThaw)
	mux.HandleFunc("POST /bridge/v1/trust", b.handleTrust)
	mux.HandleFunc("POST /bridge/v1/trust/prefetch", b.handleTrustPrefetch)
	mux.HandleFunc("GET /bridge/v1/metrics", b.handleMetrics)
	mux.HandleFunc("POST /bridge/v1/stop", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		stop(errors.New("manager asked the bridge to stop"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if !IsPublicGuestPath(r.URL.Path) {
			writeJSONError(w, http.StatusNotFound, "no such route on the host bridge: "+r.URL.Path)
			return
		}
		if !b.admit(w, r) {
			return
		}
		select {
		case b.streams <- struct{}{}:
			defer func() { <-b.streams }()
		default:
			b.refuseStream(w, r)
			return
		}
		// Streams answer before their request body is fully forwarded.
		_ = http.NewResponseController(w).EnableFullDuplex()
		before, after := forwardPoints(r.URL.Path)
		before.Hit()
		proxy.ServeHTTP(w, r)
		after.Hit()
	})
	return mux
}

// forwardPoints are the failpoints a guest request to path passes before
// and after it is forwarded: a process request's, a file transfer's, or
// none (nil points are inert).
func forwardPoints(path string) (before, after *failpoint.Point) {
	switch {
	case strings.HasPrefix(path, "/process.Process/"):
		return failpoint.BridgeBeforeExec, failpoint.BridgeAfterExec
	case path == "/files":
		return failpoint.BridgeBeforeFiles, failpoint.BridgeAfterFiles
	}
	return nil, nil
}

// refuseStream answers a guest request over Config.MaxStreams.
func (b *Bridge) refuseStream(w http.ResponseWriter, r *http.Request) {
	b.adm.count(RefusedTooManyStreams)
	err := fmt.Errorf("%w: host bridge: the sandbox has %d requests in flight, the most it may; end a stream, watch or process first",
		errdefs.ErrTooManyStreams, b.cfg.MaxStreams)
	b.log.Warn("request refused by the host bridge", "path", r.URL.Path, "reason", RefusedTooManyStreams)
	status, code, reason := apierr.Encode(apierr.Node, err)
	writeJSON(w, status, nodev1.Error{Code: code, Message: err.Error(), Reason: string(reason)})
}

// InitRequest is the body of POST /bridge/v1/init: the identity and defaults the
// guest installs. It is re-sent after every restore.
type InitRequest struct {
	SandboxID      string            `json:"sandbox_id"`
	Generation     uint64            `json:"generation"`
	ActivationID   string            `json:"activation_id"`
	Hostname       string            `json:"hostname"`
	Env            map[string]string `json:"env,omitempty"`
	DefaultUser    string            `json:"default_user,omitempty"`
	DefaultWorkdir string            `json:"default_workdir,omitempty"`
	AccessToken    string            `json:"access_token,omitempty"`
	// Node and Substrate complete the execution identity the bridge admits
	// capabilities against (with SandboxID, Generation, ActivationID).
	Node      string `json:"node,omitempty"`
	Substrate string `json:"substrate,omitempty"`
	// PidsMax caps the tasks of the sandbox's processes where the guest
	// kernel is its own (vm); 0 leaves it to the host.
	PidsMax uint32 `json:"pids_max,omitempty"`
	// CACertPEM, when set, is the sandbox's interception CA: the guest
	// trusts it (as POST /bridge/v1/trust does) while it runs Init, and the
	// identity is installed only once both are done.
	CACertPEM string `json:"ca_cert_pem,omitempty"`
}

const maxInitBody = 1 << 20

func (b *Bridge) handleInit(w http.ResponseWriter, r *http.Request) {
	var req InitRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxInitBody)).Decode(&req); err != nil {
		writeJSONError(w, http.StatusBadRequest, "init: bad body: "+err.Error())
		return
	}
	var cert []byte
	if req.CACertPEM != "" {
		var err error
		if cert, err = onePEMCertificate(req.CACertPEM); err != nil {
			writeJSONError(w, http.StatusBadRequest, "init: trust: "+err.Error())
			return
		}
	}
	entropy, err := freshEntropy()
	if err != nil {
		writeJSONError(w, http.StatusInternalServerError, err.Error())
		return
	}
	msg := &controlv1.InitRequest{
		SandboxId:      req.SandboxID,
		Generation:     req.Generation,
		ActivationId:   req.ActivationID,
		Hostname:       req.Hostname,
		EnvVars:        req.Env,
		DefaultUser:    req.DefaultUser,
		DefaultWorkdir: req.DefaultWorkdir,
		AccessToken:    req.AccessToken,
		PidsMax:        req.PidsMax,
		Entropy:        entropy,
		Now:            nowProto(),
	}
	// The CA and Init are independent guest requests on the one HTTP/2
	// connection to the guest: both run at once.
	var trustErr error
	var wg sync.WaitGroup
	if cert != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
			defer cancel()
			trustErr = b.installTrust(tctx, cert)
		}()
	}
	ctx, cancel := context.WithTimeout(r.Context(), initTimeout)
	defer cancel()
	resp, err := b.client.Control().Init(ctx, connect.NewRequest(msg))
	wg.Wait()
	if err != nil {
		writeJSONError(w, http.StatusBadGateway, "guest init: "+err.Error())
		return
	}
	if trustErr != nil {
		writeJSONError(w, http.StatusBadGateway, "init: trust: "+trustErr.Error())
		return
	}
	failpoint.BridgeAfterInit.Hit()
	b.adm.install(capability.Identity{
		Sandbox: req.SandboxID, Generation: req.Generation, Node: req.Node, Substrate: req.Substrate, Activation: req.ActivationID,
	})
	note := startNotReady(resp.Msg.GetStartNotReady())
	if note == "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(InitResult{StartNotReady: note})
}

// InitResult is the answer of POST /bridge/v1/init when there is something
// to say (200); otherwise, and from a bridge older than it, the answer is
// 204 and no body.
type InitResult struct {
	// StartNotReady says, for users, why the template's start command was
	// not ready at Init: guest text, escaped and bounded
	// (guesttext.Escape). Empty: ready, or no start command.
	StartNotReady string `json:"start_not_ready,omitempty"`
}

// startNotReady is the one-line account of nr for a sandbox event, e.g.
// "ready command failed: did not exit 0 within 2s (3 tries; last: exit
// status 3; output: db not up)". Every field is the guest's: the whole line
// goes through guesttext.Escape.
func startNotReady(nr *controlv1.StartNotReady) string {
	if nr == nil {
		return ""
	}
	var what string
	switch nr.GetStage() {
	case "not_started":
		what = "start command not started"
	case "port_not_ready":
		what = "start command's port not ready"
	case "ready_failed":
		what = "ready command failed"
	default:
		what = "start command not ready"
	}
	line := what + ": " + nr.GetDetail()
	if nr.GetStage() == "ready_failed" {
		line += fmt.Sprintf(" (%d tries; last: %s", nr.GetTries(), nr.GetLastStatus())
		if out := nr.GetOutputTail(); len(out) > 0 {
			const maxTail = 1024
			if len(out) > maxTail {
				out = out[len(out)-maxTail:]
			}
			line += "; output: " + string(out)
		}
		line += ")"
	}
	return guesttext.Escape(line)
}

// initTimeout bounds the guest's Init: it returns once the template's start
// command is ready, which may take its ready command's whole bound
// (maxReadyTimeout) after the autostart entries' and start
// command's port waits (10 s each, or up to 60 s for an entry that says so
// with "# space-ready-wait:", as the code interpreter's does). A
// 10 s bound on all of Init failed every create of the code-interpreter
// template on vm (TCG, from a restored template snapshot: "guest init:
// deadline_exceeded").
const initTimeout = maxReadyTimeout + 2*time.Minute

// maxReadyTimeout is imagecfg.MaxReadyTimeout, the longest a template's
// ready command may be waited for (TestInitTimeoutHoldsTheReadyBound keeps
// them equal): the bridge does not link the template packages.
const maxReadyTimeout = 90 * time.Second

// Activity is the body of GET /bridge/v1/activity.
type Activity struct {
	LastActivity     time.Time `json:"last_activity"`
	RunningProcesses uint32    `json:"running_processes"`
}

func (b *Bridge) handleActivity(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	resp, err := b.client.Control().Activity(ctx, connect.NewRequest(&controlv1.ActivityRequest{}))
	if err != nil {
		writeJSONError(w, http.StatusBadGateway, "guest activity: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, Activity{
		LastActivity:     resp.Msg.GetLastActivity().AsTime(),
		RunningProcesses: resp.Msg.GetRunningProcesses(),
	})
}

// listenUnix listens on path with mode 0600, replacing a stale socket file.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("bridge socket dir: %w", err)
	}
	_ = os.Remove(path)
	ln, err := unixsock.Listen(path)
	if err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("bridge: chmod %s: %w", path, err)
	}
	return ln, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"code": "bridge", "message": msg})
}
