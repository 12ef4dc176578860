package e2bapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/template/dockerfile"
)

// Template.build of the e2b SDKs, served by internal/imagebuild: POST
// /v3/templates asks for a build (templateID is the template's name, its
// E2B alias), the SDK uploads its COPY sources (tplfiles.go), POST
// /v2/templates/{templateID}/builds/{buildID} starts the steps, and the
// SDK polls GET .../status for the logs and the result.
//
// A build runs as its caller: through Host.BuildBackend, SPACE's public
// API with the caller's key, so it may do exactly what the caller may
// (building a template takes an admin key, as POST /v1/templates). Builds
// are recorded in the store (tplrecords.go): their status answers after a
// restart and on every replica. This process keeps the builds it runs or
// ran lately: the last maxBuilds, each with at most maxBuildLogs log
// entries of at most maxLogMessage bytes. Builds stop, their sandboxes
// removed, when StopBuilds is called.
//
// A name is an E2B alias (tpltags.go): the first build of a free name
// makes the SPACE template of that name; a rebuild by the tenant whose
// build made it makes a new template (NAME.xxxxxxxx) that the name stands
// for once it is ready. The old one stays, and sandboxes made from it
// run on; a failed rebuild changes nothing.

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
	buildWaiting  = string(store.BuildWaiting)
	buildBuilding = string(store.BuildBuilding)
	buildReady    = string(store.BuildReady)
	buildError    = string(store.BuildError)
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
	// templateID is the alias the build was asked under; template the
	// SPACE template it makes.
	id, templateID, tenant, template string
	// cpus and memoryMiB size the sandboxes made through the alias (0:
	// the server's default).
	cpus, memoryMiB int
	// sandbox is the build sandbox while one runs.
	sandbox string
	created time.Time
	status  string
	logs    []logEntry
	reason  *buildReason
}

// templateBuilds is the server's builds.
type templateBuilds struct {
	// ctx is every build's; cancel stops them, wg waits for them.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// st records the builds; nil keeps them in this process only.
	st store.TemplateBuilds
	// deleteSandbox removes a lost build's sandbox as its tenant.
	deleteSandbox func(ctx context.Context, tenant, id string) error
	logger        *slog.Logger
	mu            sync.Mutex // guards byID, stopped and the builds' fields
	byID          map[string]*templateBuild
	// stopped refuses new builds once StopBuilds ran.
	stopped bool
}

func newTemplateBuilds() *templateBuilds {
	ctx, cancel := context.WithCancel(context.Background())
	return &templateBuilds{ctx: ctx, cancel: cancel, byID: map[string]*templateBuild{}, logger: slog.New(slog.DiscardHandler)}
}

// StopBuilds cancels the running builds and waits until each has removed
// its build sandbox and recorded its failure; later builds are refused.
// The server calls it before it stops serving, while the builds can still
// reach its API.
func (a *API) StopBuilds() {
	a.builds.mu.Lock()
	a.builds.stopped = true
	a.builds.mu.Unlock()
	a.builds.cancel()
	a.builds.wg.Wait()
}

// newBuild is what a build request asks for.
type newBuild struct {
	tenant, alias, template string
	cpus, memoryMiB         int
}

// add records a new build.
func (b *templateBuilds) add(ctx context.Context, nb newBuild, now time.Time) (*templateBuild, error) {
	tb, err := b.addLocal(nb, now)
	if err != nil || b.st == nil {
		return tb, err
	}
	b.mu.Lock()
	r := tb.record()
	b.mu.Unlock()
	if err := b.st.CreateTemplateBuild(ctx, r); err != nil {
		b.mu.Lock()
		delete(b.byID, tb.id)
		b.mu.Unlock()
		return nil, fmt.Errorf("record the build: %w", err)
	}
	return tb, nil
}

// addLocal adds the build to this process's, within the bounds.
func (b *templateBuilds) addLocal(nb newBuild, now time.Time) (*templateBuild, error) {
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
		if tb.tenant == nb.tenant && !done {
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
	if nb.template == "" {
		nb.template = nb.alias
	}
	tb := &templateBuild{id: "bld-" + sandbox.NewID(), templateID: nb.alias, tenant: nb.tenant, template: nb.template,
		cpus: nb.cpus, memoryMiB: nb.memoryMiB, created: now, status: buildWaiting}
	b.byID[tb.id] = tb
	return tb, nil
}

// get is tenant's build id of templateID; with id "", any of its builds
// of templateID that waits for its start. Another tenant's build is not
// found. A build this process does not have is read from the store (a
// lost one marked failed); one that waits for its start is taken on here.
func (b *templateBuilds) get(ctx context.Context, tenant, templateID, id string) (*templateBuild, error) {
	b.mu.Lock()
	if id != "" {
		if tb, ok := b.byID[id]; ok && tb.tenant == tenant && tb.templateID == templateID {
			b.mu.Unlock()
			return tb, nil
		}
	} else {
		for _, tb := range b.byID {
			if tb.tenant == tenant && tb.templateID == templateID && tb.status == buildWaiting {
				b.mu.Unlock()
				return tb, nil
			}
		}
	}
	b.mu.Unlock()
	if id == "" {
		id = b.waitingID(ctx, tenant, templateID)
	}
	tb, err := b.stored(ctx, tenant, templateID, id, time.Now())
	if err != nil {
		return nil, err
	}
	if tb == nil {
		return nil, fmt.Errorf("%w: template %s has no such build", errdefs.ErrNotFound, service.Clip(templateID))
	}
	if tb.status == buildWaiting {
		b.mu.Lock()
		if cur, ok := b.byID[tb.id]; ok {
			tb = cur
		} else if !b.stopped && len(b.byID) < maxBuilds {
			b.byID[tb.id] = tb
		}
		b.mu.Unlock()
	}
	return tb, nil
}

// waitingID is the id of a stored build of tenant's templateID that waits
// for its start, "" for none.
func (b *templateBuilds) waitingID(ctx context.Context, tenant, templateID string) string {
	if b.st == nil {
		return ""
	}
	list, err := b.st.ListTemplateBuilds(ctx, templateID)
	if err != nil {
		return ""
	}
	for _, r := range list {
		if r.TenantID == tenant && r.State == store.BuildWaiting {
			return r.ID
		}
	}
	return ""
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
func (b *templateBuilds) finish(ctx context.Context, tb *templateBuild, reason *buildReason) {
	status := buildReady
	if reason != nil {
		status = buildError
	}
	// The store learns that the build ended before its status answers say
	// so: a client that reads ready and creates from the alias at once is
	// answered from the store (e2bTemplateOf), which must know the build
	// by then, or the create would start the template it replaces.
	b.mu.Lock()
	r := tb.record()
	b.mu.Unlock()
	r.State, r.Reason = store.TemplateBuildState(status), reasonText(reason)
	b.saveRecord(ctx, r)
	b.mu.Lock()
	tb.status, tb.reason = status, reason
	b.mu.Unlock()
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

// handleTemplateBuild serves POST /v2/templates/{templateID}/builds/{buildID}:
// the build's steps, run in the background.
func (a *API) handleTemplateBuild(w http.ResponseWriter, r *http.Request) {
	c := a.host.Caller(r.Context())
	tb, err := a.builds.get(r.Context(), c.Tenant, r.PathValue("templateID"), r.PathValue("buildID"))
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
	a.builds.save(r.Context(), tb)
	go func() {
		defer a.builds.wg.Done()
		a.runBuild(a.builds.ctx, backend, tb, spec, df, force)
	}()
	w.WriteHeader(http.StatusAccepted)
}

// runBuild runs build tb: its COPY uploads extracted into a context
// directory, then the steps, recording the log and the result; its record
// is rewritten every buildHeartbeat while it runs.
func (a *API) runBuild(ctx context.Context, backend imagebuild.Backend, tb *templateBuild, spec templateSpec, df *dockerfile.File, force bool) {
	hctx, stopHeartbeat := context.WithCancel(ctx)
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		a.builds.heartbeat(hctx, tb)
	}()
	defer func() { stopHeartbeat(); <-beating }()
	lw := &logWriter{b: a.builds, tb: tb}
	err := a.buildSteps(ctx, a.builds.tracked(ctx, backend, tb), tb, spec, df, force, lw)
	lw.flush()
	stopHeartbeat()
	<-beating
	if err == nil {
		a.builds.log(tb, "info", "template "+tb.templateID+" ready (SPACE template "+tb.template+")")
		a.builds.finish(ctx, tb, nil)
		a.pruneBuilds(ctx, backend, tb)
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
	if ctx.Err() != nil {
		// StopBuilds: the server stops.
		msg = reasonRestarted
	} else if a.host.Status(err) == http.StatusInternalServerError && se == nil {
		a.log.Error("e2b template build", "build", tb.id, "template", tb.templateID, "err", err)
	}
	a.builds.log(tb, "error", msg)
	a.builds.mu.Lock()
	tail := append([]logEntry(nil), tb.logs[max(0, len(tb.logs)-20):]...)
	a.builds.mu.Unlock()
	a.builds.finish(ctx, tb, &buildReason{Message: msg, Step: step, LogEntries: tail})
	a.pruneBuilds(ctx, backend, tb)
}

// buildSteps prepares the context and runs the steps.
func (a *API) buildSteps(ctx context.Context, backend imagebuild.Backend, tb *templateBuild, spec templateSpec, df *dockerfile.File, force bool, log io.Writer) error {
	// The files directory is made by the first upload: a build that
	// copies nothing may come first.
	if a.filesDir != "" {
		if err := os.MkdirAll(a.filesDir, 0o700); err != nil {
			return fmt.Errorf("build context: %w", err)
		}
	}
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
	if _, local, _ := localImage(spec.FromImage); local {
		src, name, err := imageBase(spec.FromImage)
		if err != nil {
			return err
		}
		df.From = name
		if err := imagebuild.ImportBase(ctx, backend, src, df.From, log); err != nil {
			return err
		}
	}
	// The build sandbox runs on the server's default runtime (Runtime ""),
	// so a deployment whose nodes offer only vm builds too.
	plan, err := imagebuild.Prepare(imagebuild.Job{
		Name: tb.template, File: df, ContextDir: dir, Runtime: "", NoCache: force, Log: log, Ready: spec.ReadyCmd,
	})
	if err != nil {
		return err
	}
	if _, err = imagebuild.Run(ctx, backend, plan); err != nil {
		return err
	}
	if im, ok := backend.(imagebuild.Imports); ok && spec.FromImage != "" {
		// Built FROM an image (an admin's build): the build's holder uses
		// its import now; the others may be unused.
		if _, err := imagebuild.CollectImports(ctx, im, imagebuild.ImportTTL, time.Now(), df.From, log); err != nil {
			fmt.Fprintf(log, "space: warning: %v\n", err)
		}
	}
	return nil
}

// handleTemplateBuildStatus serves GET /templates/{templateID}/builds/{buildID}/status:
// the status, the log entries from logsOffset on, and a failure's reason.
func (a *API) handleTemplateBuildStatus(w http.ResponseWriter, r *http.Request) {
	c := a.host.Caller(r.Context())
	tb, err := a.builds.get(r.Context(), c.Tenant, r.PathValue("templateID"), r.PathValue("buildID"))
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
