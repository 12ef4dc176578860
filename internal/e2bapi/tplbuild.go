package e2bapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/imagebuild"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/template/dockerfile"
)

// Template.build of the e2b SDKs, served by internal/imagebuild: POST
// /v3/templates asks for a build (templateID is the template's name,
// SPACE's templates being named), the SDK uploads its COPY sources
// (tplfiles.go), POST /v2/templates/{templateID}/builds/{buildID} starts
// the steps, and the SDK polls GET .../status for the logs and the result.
//
// A build runs as its caller: through Host.BuildBackend, SPACE's public
// API with the caller's key, so it may do exactly what the caller may
// (building a template takes an admin key, as POST /v1/templates). Build
// state lives in this process only: the last maxBuilds builds, each with at
// most maxBuildLogs log entries of at most maxLogMessage bytes. Builds
// stop, their sandboxes removed, when StopBuilds is called.

const (
	// maxBuilds is how many builds the server remembers; past it the
	// oldest finished one is forgotten, and with none finished a request
	// is refused.
	maxBuilds = 256
	// maxTenantBuilds is how many builds of one tenant run at once.
	maxTenantBuilds = 2
	// maxBuildLogs caps a build's log entries; the last says it is capped.
	maxBuildLogs = 5000
	// maxLogMessage caps one log entry's message, in bytes.
	maxLogMessage = 4096
	// unstartedTTL is how long a requested build waits for its start.
	unstartedTTL = time.Hour
)

// buildStatus values are E2B's.
const (
	buildWaiting  = "waiting"
	buildBuilding = "building"
	buildReady    = "ready"
	buildError    = "error"
)

// logEntry is E2B's build log entry.
type logEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
}

// buildReason is E2B's failure of a build: the message, and the step the
// SDK maps to the Template call that made it ("base", "finalize" or a
// step number).
type buildReason struct {
	Message    string     `json:"message"`
	Step       string     `json:"step,omitempty"`
	LogEntries []logEntry `json:"logEntries"`
}

// templateBuild is one build. Its fields are guarded by templateBuilds.mu.
type templateBuild struct {
	id, templateID, tenant string
	created                time.Time
	status                 string
	logs                   []logEntry
	reason                 *buildReason
}

// templateBuilds is the server's builds.
type templateBuilds struct {
	// ctx is every build's; cancel stops them, wg waits for them.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex // guards byID, stopped and the builds' fields
	byID   map[string]*templateBuild
	// stopped refuses new builds once StopBuilds ran.
	stopped bool
}

func newTemplateBuilds() *templateBuilds {
	ctx, cancel := context.WithCancel(context.Background())
	return &templateBuilds{ctx: ctx, cancel: cancel, byID: map[string]*templateBuild{}}
}

// StopBuilds cancels the running builds and waits until each has removed
// its build sandbox; later builds are refused. The server calls it before
// it stops serving, while the builds can still reach its API.
func (a *API) StopBuilds() {
	a.builds.mu.Lock()
	a.builds.stopped = true
	a.builds.mu.Unlock()
	a.builds.cancel()
	a.builds.wg.Wait()
}

// add records a new build of tenant's templateID.
func (b *templateBuilds) add(tenant, templateID string, now time.Time) (*templateBuild, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return nil, fmt.Errorf("%w: the server is stopping", errdefs.ErrUnavailable)
	}
	running := 0
	var oldest *templateBuild
	for _, tb := range b.byID {
		done := tb.status == buildReady || tb.status == buildError || (tb.status == buildWaiting && now.Sub(tb.created) > unstartedTTL)
		if done && (oldest == nil || tb.created.Before(oldest.created)) {
			oldest = tb
		}
		if tb.tenant == tenant && !done {
			running++
		}
	}
	if running >= maxTenantBuilds {
		return nil, fmt.Errorf("%w: %d template builds of this tenant are under way; wait for one to finish", errdefs.ErrResourceExhausted, running)
	}
	if len(b.byID) >= maxBuilds {
		if oldest == nil {
			return nil, fmt.Errorf("%w: %d template builds are under way; try again later", errdefs.ErrResourceExhausted, len(b.byID))
		}
		delete(b.byID, oldest.id)
	}
	tb := &templateBuild{id: "bld-" + sandbox.NewID(), templateID: templateID, tenant: tenant, created: now, status: buildWaiting}
	b.byID[tb.id] = tb
	return tb, nil
}

// get is tenant's build id of templateID; with id "", any of its builds
// of templateID that waits for its start. Another tenant's build is not
// found.
func (b *templateBuilds) get(tenant, templateID, id string) (*templateBuild, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if id != "" {
		if tb, ok := b.byID[id]; ok && tb.tenant == tenant && tb.templateID == templateID {
			return tb, nil
		}
	} else {
		for _, tb := range b.byID {
			if tb.tenant == tenant && tb.templateID == templateID && tb.status == buildWaiting {
				return tb, nil
			}
		}
	}
	return nil, fmt.Errorf("%w: template %s has no such build", errdefs.ErrNotFound, service.Clip(templateID))
}

// log appends an entry to tb's log, up to maxBuildLogs.
func (b *templateBuilds) log(tb *templateBuild, level, msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch n := len(tb.logs); {
	case n >= maxBuildLogs:
		return
	case n == maxBuildLogs-1:
		level, msg = "warn", fmt.Sprintf("the build log is capped at %d entries: later lines are not kept", maxBuildLogs)
	}
	if len(msg) > maxLogMessage {
		msg = strings.ToValidUTF8(msg[:maxLogMessage], "") + "…"
	}
	tb.logs = append(tb.logs, logEntry{Timestamp: time.Now().UTC(), Level: level, Message: msg})
}

// finish records tb's end.
func (b *templateBuilds) finish(tb *templateBuild, reason *buildReason) {
	b.mu.Lock()
	defer b.mu.Unlock()
	tb.status = buildReady
	if reason != nil {
		tb.status, tb.reason = buildError, reason
	}
}

// logWriter turns what a build writes into log entries, one a line.
type logWriter struct {
	b       *templateBuilds
	tb      *templateBuild
	partial []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.b.log(w.tb, "info", string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	if len(w.partial) > maxLogMessage {
		w.b.log(w.tb, "info", string(w.partial))
		w.partial = nil
	}
	return len(p), nil
}

func (w *logWriter) flush() {
	if len(w.partial) > 0 {
		w.b.log(w.tb, "info", string(w.partial))
		w.partial = nil
	}
}

// handleTemplateRequest serves POST /v3/templates (and POST /templates,
// v2): a new build of template name.
func (a *API) handleTemplateRequest(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name  string   `json:"name"`
		Alias string   `json:"alias"`
		Tags  []string `json:"tags"`
	}
	if err := decodeE2B(w, r, &req); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if req.Name == "" {
		req.Name = req.Alias
	}
	name, tag, _ := strings.Cut(req.Name, ":")
	c := a.host.Caller(r.Context())
	switch {
	case !c.Admin:
		a.writeE2BErr(w, r, fmt.Errorf("%w: building a template takes an admin key: SPACE's templates are shared by every tenant (POST /v1/templates is the admin's too)", errdefs.ErrPermissionDenied))
		return
	case name == "":
		a.writeE2BErr(w, r, fmt.Errorf("%w: the build names no template", errdefs.ErrInvalidArgument))
		return
	case (tag != "" && tag != "default") || len(req.Tags) > 0 && !(len(req.Tags) == 1 && req.Tags[0] == "default"):
		a.writeE2BErr(w, r, fmt.Errorf("%w: template tags are not supported by SPACE: a template has one build, under its name; build another name instead", errdefs.ErrInvalidArgument))
		return
	}
	backend, err := a.host.BuildBackend(r)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if taken, err := backend.TemplateTaken(r.Context(), name); err != nil {
		a.writeE2BErr(w, r, err)
		return
	} else if taken {
		a.writeE2BErr(w, r, fmt.Errorf("%w: template %s exists; delete it first (space template delete %s)", errdefs.ErrConflict, service.Clip(name), service.Clip(name)))
		return
	}
	tb, err := a.builds.add(c.Tenant, name, time.Now())
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"templateID": name, "buildID": tb.id, "tags": []string{"default"}, "aliases": []string{name}, "public": false})
}

// handleTemplateBuild serves POST /v2/templates/{templateID}/builds/{buildID}:
// the build's steps, run in the background.
func (a *API) handleTemplateBuild(w http.ResponseWriter, r *http.Request) {
	c := a.host.Caller(r.Context())
	tb, err := a.builds.get(c.Tenant, r.PathValue("templateID"), r.PathValue("buildID"))
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	var spec templateSpec
	if err := decodeE2B(w, r, &spec); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	df, force, err := dockerfileOf(spec)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if _, local, _ := localImage(spec.FromImage); local && !c.Admin {
		// The path is read by the server with its own rights: only an
		// admin, who may name server paths as template sources, may.
		a.writeE2BErr(w, r, fmt.Errorf("%w: fromImage(%q) names a path on the server's machine: an admin key only (or fromTemplate with a template an admin imported)", errdefs.ErrPermissionDenied, service.Clip(spec.FromImage)))
		return
	}
	backend, err := a.host.BuildBackend(r)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	a.builds.mu.Lock()
	startable := tb.status == buildWaiting && !a.builds.stopped
	if startable {
		tb.status = buildBuilding
		a.builds.wg.Add(1)
	}
	a.builds.mu.Unlock()
	if !startable {
		a.writeE2BErr(w, r, fmt.Errorf("%w: build %s was started already, or the server is stopping", errdefs.ErrConflict, tb.id))
		return
	}
	go func() {
		defer a.builds.wg.Done()
		a.runBuild(a.builds.ctx, backend, tb, spec, df, force)
	}()
	w.WriteHeader(http.StatusAccepted)
}

// runBuild runs build tb: its COPY uploads extracted into a context
// directory, then the steps, recording the log and the result.
func (a *API) runBuild(ctx context.Context, backend imagebuild.Backend, tb *templateBuild, spec templateSpec, df *dockerfile.File, force bool) {
	lw := &logWriter{b: a.builds, tb: tb}
	err := a.buildSteps(ctx, backend, tb, spec, df, force, lw)
	lw.flush()
	if err == nil {
		a.builds.log(tb, "info", "template "+tb.templateID+" ready")
		a.builds.finish(tb, nil)
		return
	}
	step := "base"
	var se *imagebuild.StepError
	if errors.As(err, &se) {
		step = strconv.Itoa(se.Index + 1)
		if se.Index >= len(spec.Steps) {
			step = "finalize"
		}
	}
	msg := err.Error()
	if a.host.Status(err) == http.StatusInternalServerError && se == nil {
		a.log.Error("e2b template build", "build", tb.id, "template", tb.templateID, "err", err)
	}
	a.builds.log(tb, "error", msg)
	a.builds.mu.Lock()
	tail := append([]logEntry(nil), tb.logs[max(0, len(tb.logs)-20):]...)
	a.builds.mu.Unlock()
	a.builds.finish(tb, &buildReason{Message: msg, Step: step, LogEntries: tail})
}

// buildSteps prepares the context and runs the steps.
func (a *API) buildSteps(ctx context.Context, backend imagebuild.Backend, tb *templateBuild, spec templateSpec, df *dockerfile.File, force bool, log io.Writer) error {
	dir, err := os.MkdirTemp(a.filesDir, ".context-*")
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	defer os.RemoveAll(dir)
	for i, s := range spec.Steps {
		if s.Type != "COPY" {
			continue
		}
		if err := a.extractUpload(ctx, tb.tenant, s.FilesHash, filepath.Join(dir, copyDir(i))); err != nil {
			return &imagebuild.StepError{Index: i, Err: fmt.Errorf("COPY %s: %w", service.Clip(s.Args[0]), err)}
		}
	}
	if src, local, _ := localImage(spec.FromImage); local {
		if err := imagebuild.ImportBase(ctx, backend, src, df.From, log); err != nil {
			return err
		}
	}
	// The build sandbox runs on the server's default runtime (Runtime ""),
	// so a deployment whose nodes offer only vm builds too.
	plan, err := imagebuild.Prepare(imagebuild.Job{
		Name: tb.templateID, File: df, ContextDir: dir, Runtime: "", NoCache: force, Log: log, Ready: spec.ReadyCmd,
	})
	if err != nil {
		return err
	}
	_, err = imagebuild.Run(ctx, backend, plan)
	return err
}

// handleTemplateBuildStatus serves GET /templates/{templateID}/builds/{buildID}/status:
// the status, the log entries from logsOffset on, and a failure's reason.
func (a *API) handleTemplateBuildStatus(w http.ResponseWriter, r *http.Request) {
	c := a.host.Caller(r.Context())
	tb, err := a.builds.get(c.Tenant, r.PathValue("templateID"), r.PathValue("buildID"))
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	offset := 0
	if v := r.URL.Query().Get("logsOffset"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			a.writeE2BErr(w, r, fmt.Errorf("%w: logsOffset %q: want a count of entries", errdefs.ErrInvalidArgument, service.Clip(v)))
			return
		}
	}
	a.builds.mu.Lock()
	entries := []logEntry{}
	if offset < len(tb.logs) {
		entries = append(entries, tb.logs[offset:]...)
	}
	status, reason := tb.status, tb.reason
	a.builds.mu.Unlock()
	lines := make([]string, len(entries))
	for i, e := range entries {
		lines[i] = e.Message
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"buildID": tb.id, "templateID": tb.templateID, "status": status,
		"logEntries": entries, "logs": lines, "reason": reason,
	})
}

// handleTemplateAlias serves GET /templates/aliases/{alias}: 200 when a
// template of that name exists, 404 when the name is free.
func (a *API) handleTemplateAlias(w http.ResponseWriter, r *http.Request) {
	backend, err := a.host.BuildBackend(r)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	alias := r.PathValue("alias")
	taken, err := backend.TemplateTaken(r.Context(), alias)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if !taken {
		writeE2BError(w, http.StatusNotFound, "no template "+service.Clip(alias))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": alias, "public": true})
}
