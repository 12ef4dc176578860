package node

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/bridge"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/privop"
	"github.com/spacesandbox/space/internal/unixsock"
)

// maxAPIBody bounds the JSON bodies the node-api reads.
const maxAPIBody = 1 << 20

// Handler returns the node-api HTTP handler.
func (m *Manager) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /node/v1/info", m.handleInfo)
	mux.HandleFunc("GET /node/v1/metrics", m.handleMetrics)
	mux.HandleFunc("GET /node/v1/executions", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, nodev1.ExecutionList{Executions: m.List(r.Context())})
	})
	mux.HandleFunc("POST /node/v1/executions", m.handleStart)
	mux.HandleFunc("GET /node/v1/executions/{exec}", func(w http.ResponseWriter, r *http.Request) {
		ex, err := m.Get(r.Context(), r.PathValue("exec"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, ex)
	})
	mux.HandleFunc("DELETE /node/v1/executions/{exec}", func(w http.ResponseWriter, r *http.Request) {
		if err := m.Stop(r.Context(), r.PathValue("exec")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /node/v1/executions/{exec}/pause", func(w http.ResponseWriter, r *http.Request) {
		m.handlePauseResume(w, r, true)
	})
	mux.HandleFunc("PUT /node/v1/executions/{exec}/egress", m.handleSetEgress)
	mux.HandleFunc("GET /node/v1/executions/{exec}/stats", func(w http.ResponseWriter, r *http.Request) {
		st, err := m.Stats(r.Context(), r.PathValue("exec"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("POST /node/v1/executions/{exec}/resume", func(w http.ResponseWriter, r *http.Request) {
		m.handlePauseResume(w, r, false)
	})
	mux.HandleFunc("POST /node/v1/executions/{exec}/snapshots", func(w http.ResponseWriter, r *http.Request) {
		var req nodev1.TakeSnapshot
		if err := decodeJSON(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		snap, err := m.Snapshot(r.Context(), r.PathValue("exec"), req)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, snap)
	})
	mux.HandleFunc("GET /node/v1/snapshots", func(w http.ResponseWriter, r *http.Request) {
		snaps, err := m.Snapshots(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, nodev1.SnapshotList{Snapshots: snaps})
	})
	mux.HandleFunc("POST /node/v1/snapshots/{id}/upload", func(w http.ResponseWriter, r *http.Request) {
		var req nodev1.UploadSnapshot
		if err := decodeJSON(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		serveLong(w, r, func(report Reporter) (any, error) {
			return m.Upload(r.Context(), r.PathValue("id"), req, report)
		})
	})
	mux.HandleFunc("POST /node/v1/snapshots/{id}/download", func(w http.ResponseWriter, r *http.Request) {
		var req nodev1.DownloadSnapshot
		if err := decodeJSON(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		serveLong(w, r, func(report Reporter) (any, error) {
			return m.Download(r.Context(), r.PathValue("id"), req, report)
		})
	})
	mux.HandleFunc("DELETE /node/v1/snapshots/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := m.DeleteSnapshot(r.Context(), r.PathValue("id")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /node/v1/orphans", func(w http.ResponseWriter, r *http.Request) {
		var req nodev1.CollectOrphans
		if err := decodeJSON(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		found, err := m.CollectOrphans(r.Context(), req.DryRun)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, found)
	})
	mux.HandleFunc("/node/v1/executions/{exec}/guest/{rest...}", m.handleGuest)
	mux.HandleFunc("/node/v1/executions/{exec}/ports/{port}/{rest...}", m.handlePort)
	mux.HandleFunc("GET /node/v1/executions/{exec}/tcp/{port}", m.handlePortTCP)
	mux.HandleFunc("POST /node/v1/templates", m.handleEnsureTemplate)
	mux.HandleFunc("GET /node/v1/templates", func(w http.ResponseWriter, r *http.Request) {
		names, err := m.cfg.Privileged.Templates(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, nodev1.TemplateList{Templates: names})
	})
	mux.HandleFunc("DELETE /node/v1/templates/{name}", func(w http.ResponseWriter, r *http.Request) {
		if err := m.cfg.Privileged.DeleteTemplate(r.Context(), r.PathValue("name")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return m.authenticate(mux)
}

func (m *Manager) authenticate(next http.Handler) http.Handler {
	want := []byte(m.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get(TokenHeader))
		if m.cfg.Token == "" || subtle.ConstantTimeCompare(got, want) != 1 {
			writeError(w, fmt.Errorf("%w: node token required", errdefs.ErrUnauthenticated))
			return
		}
		// The token is for this hop only; never forward it to the guest.
		r.Header.Del(TokenHeader)
		next.ServeHTTP(w, r)
	})
}

func (m *Manager) handleInfo(w http.ResponseWriter, r *http.Request) {
	hello, err := m.cfg.Privileged.Hello(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, nodev1.Info{
		NodeID: m.cfg.NodeID, Runtimes: hello.Runtimes, Storage: hello.Storage,
		CPUs: m.cfg.CPUs, MemoryMiB: m.cfg.MemoryMiB,
	})
}

func (m *Manager) handleStart(w http.ResponseWriter, r *http.Request) {
	var req nodev1.StartExecution
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	ex, err := m.Start(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ex)
}

func (m *Manager) handlePauseResume(w http.ResponseWriter, r *http.Request, pause bool) {
	if err := m.PauseResume(r.Context(), r.PathValue("exec"), pause); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (m *Manager) handleEnsureTemplate(w http.ResponseWriter, r *http.Request) {
	var req nodev1.EnsureTemplate
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	serveLong(w, r, func(report Reporter) (any, error) {
		var ok *privop.TemplateOK
		var err error
		if report == nil {
			ok, err = m.cfg.Privileged.EnsureTemplate(r.Context(), req.Name, req.Source)
		} else {
			ok, err = m.cfg.Privileged.EnsureTemplateProgress(r.Context(), req.Name, req.Source, report)
		}
		if err != nil {
			return nil, err
		}
		out := nodev1.TemplateReady{Name: req.Name, SizeBytes: ok.SizeBytes}
		if ok.Progress != nil {
			p := nodev1.Progress(*ok.Progress)
			out.Progress = &p
		}
		return out, nil
	})
}

// handleGuest forwards a public guest route to the execution's host bridge.
func (m *Manager) handleGuest(w http.ResponseWriter, r *http.Request) {
	execID := r.PathValue("exec")
	path := "/" + r.PathValue("rest")
	if !bridge.IsPublicGuestPath(path) {
		writeError(w, fmt.Errorf("%w: no guest route %s", errdefs.ErrNotFound, path))
		return
	}
	if err := validSandboxExecID(execID); err != nil {
		writeError(w, err)
		return
	}
	rec, err := m.records.load(execID)
	if err != nil {
		writeError(w, fmt.Errorf("%w: exec %s is not on this node", errdefs.ErrNotFound, execID))
		return
	}
	if err := m.checkCapability(r.Header.Get(capability.Header), rec, bridge.GuestOp(path), m.now()); err != nil {
		writeError(w, err)
		return
	}
	if rec.Fenced {
		writeError(w, fmt.Errorf("%w: exec %s is frozen: node %s lost touch with the control plane; retry once it is back", errdefs.ErrUnavailable, execID, m.cfg.NodeID))
		return
	}
	// The capability goes on to the host bridge, which admits the request
	// again against its own installed identity and strips it: the guest
	// never sees it.
	// The request holds a lease on the execution: retiring or stopping it
	// cuts the request (a stream stops at once).
	leaseCtx, release := m.streams.acquire(r.Context(), execID)
	defer release()
	r = r.WithContext(leaseCtx)
	bc, err := m.bridge(rec)
	if err != nil {
		writeError(w, err)
		return
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", "bridge", "bridge"
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			if pr.Out.Body != nil && pr.Out.Body != http.NoBody {
				pr.Out.Body = bridge.LargeCopyBody(pr.Out.Body)
			}
		},
		Transport:     bc.transport,
		FlushInterval: -1,
		BufferPool:    bridge.ProxyBuffers,
		ErrorLog:      slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			m.log.Warn("forward to host bridge failed", "exec", execID, "path", path, "err", err)
			writeError(w, fmt.Errorf("%w: exec %s: host bridge: %v", errdefs.ErrUnavailable, execID, err))
		},
	}
	// The guest may answer (and the proxy flush headers) before the request
	// body has been forwarded; HTTP/1 would then cut the body off mid-stream.
	_ = http.NewResponseController(w).EnableFullDuplex()
	proxy.ServeHTTP(w, r)
}

func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAPIBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: request body: %v", errdefs.ErrInvalidArgument, err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers err with the status, code and reason of its class and
// reason.
func writeError(w http.ResponseWriter, err error) {
	status, code, reason := apierr.Encode(apierr.Node, err)
	writeJSON(w, status, nodev1.Error{Code: code, Message: err.Error(), Reason: string(reason)})
}

// StatusOf maps an error to the node-api's HTTP status and API error code:
// the table's node column (internal/apierr), where a refresh-route refusal
// is 409 and a clock refusal 503 clock_disagrees.
func StatusOf(err error) (int, string) {
	status, code, _ := apierr.Encode(apierr.Node, err)
	return status, code
}

// Serve serves the node-api on addr ("unix:PATH" or "HOST:PORT") until ctx is done.
func (m *Manager) Serve(ctx context.Context, addr string) error {
	var ln net.Listener
	var err error
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		_ = os.MkdirAll(filepath.Dir(path), 0o700)
		_ = os.Remove(path)
		ln, err = unixsock.Listen(path)
		if err == nil {
			err = os.Chmod(path, 0o600)
		}
	} else {
		ln, err = net.Listen("tcp", addr)
	}
	if err != nil {
		return fmt.Errorf("node-api: listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second}
	m.FinishInterruptedStarts(ctx)
	m.servingOnce.Do(func() { close(m.serving) })
	go m.ReattachGateways(ctx)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	m.log.Info("node-api listening", "addr", addr, "node", m.cfg.NodeID, "cpus", runtime.NumCPU())
	if err := srv.Serve(bridge.BufferedListener{Listener: ln}); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// TokenHeader carries the node token on control plane to node requests. It is
// not Authorization, which belongs to the guest protocol (E2B's Basic user).
const TokenHeader = "X-Space-Node-Token"
