package e2bapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/imagebuild"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// A build's record (store.TemplateBuild) outlives the process that runs
// it: a restarted server, or another replica, answers its status from the
// store. The log is this process's only; a finished build's reason keeps
// its last entries.
//
// A running build rewrites its record every buildHeartbeat, and records
// its build sandbox as soon as it has one. A record left waiting or
// building whose writes stopped (its server died: no StopBuilds ran) is
// lost once buildLostAfter passes without a write: whoever reads it then
// removes its sandbox and marks it failed, "the server restarted during
// the build". The store refuses every write to a final record, so a build
// marked lost is never brought back by a late write of a server that was
// only slow. A server that stops cleanly (StopBuilds) writes that reason
// itself, at once.

const (
	// buildHeartbeat is how often a running build rewrites its record.
	buildHeartbeat = 5 * time.Second
	// buildLostAfter is how long a running build's record may go
	// unwritten before it counts as lost.
	buildLostAfter = 6 * buildHeartbeat
)

// reasonRestarted is the failure of a build its server stopped or lost.
const reasonRestarted = "the server restarted during the build: build again"

// record is tb as the store keeps it; the caller holds b.mu.
func (tb *templateBuild) record() store.TemplateBuild {
	r := store.TemplateBuild{
		ID: tb.id, TenantID: tb.tenant, Alias: tb.templateID, Template: tb.template,
		State: store.TemplateBuildState(tb.status), SandboxID: tb.sandbox,
		CPUs: tb.cpus, MemoryMiB: tb.memoryMiB, CreatedAt: tb.created,
	}
	r.Reason = reasonText(tb.reason)
	return r
}

// reasonText is a build's reason as the store keeps it ("" for none).
func reasonText(reason *buildReason) string {
	if reason == nil {
		return ""
	}
	b, _ := json.Marshal(reason)
	return string(b)
}

// buildOf is a stored build as this process shows it (no log but its
// reason's entries).
func buildOf(r store.TemplateBuild) *templateBuild {
	tb := &templateBuild{
		id: r.ID, templateID: r.Alias, tenant: r.TenantID, template: r.Template, created: r.CreatedAt,
		status: string(r.State), sandbox: r.SandboxID, cpus: r.CPUs, memoryMiB: r.MemoryMiB,
	}
	if r.Reason != "" {
		var reason buildReason
		if err := json.Unmarshal([]byte(r.Reason), &reason); err != nil {
			reason = buildReason{Message: "the build failed; its stored reason does not decode"}
		}
		tb.reason = &reason
		tb.logs = append(tb.logs, reason.LogEntries...)
	}
	return tb
}

// save writes tb's record; a store that refuses it (a final record, a
// store that is down) is logged: the build goes on, its status answered
// from memory here.
func (b *templateBuilds) save(ctx context.Context, tb *templateBuild) {
	if b.st == nil {
		return
	}
	b.mu.Lock()
	r := tb.record()
	b.mu.Unlock()
	b.saveRecord(ctx, r)
}

// saveRecord writes build record r to the store, if there is one.
func (b *templateBuilds) saveRecord(ctx context.Context, r store.TemplateBuild) {
	if b.st == nil {
		return
	}
	if err := b.st.UpdateTemplateBuild(context.WithoutCancel(ctx), r); err != nil {
		b.logger.Warn("e2b template build: record", "build", r.ID, "err", err)
	}
}

// heartbeat saves tb every buildHeartbeat until ctx is done.
func (b *templateBuilds) heartbeat(ctx context.Context, tb *templateBuild) {
	t := time.NewTicker(buildHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b.save(ctx, tb)
		}
	}
}

// stored is build id of tenant's templateID from the store, a lost one
// marked failed (lost); nil when the store has no such build.
func (b *templateBuilds) stored(ctx context.Context, tenant, templateID, id string, now time.Time) (*templateBuild, error) {
	if b.st == nil || id == "" {
		return nil, nil
	}
	r, err := b.st.GetTemplateBuild(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) || err == nil && (r.TenantID != tenant || r.Alias != templateID) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if lostBuild(r, now) {
		if r, err = b.markLost(ctx, r); err != nil {
			return nil, err
		}
	}
	return buildOf(r), nil
}

// lostBuild reports whether r is a build no server runs any more at now:
// building with no write for buildLostAfter, or waiting past unstartedTTL.
func lostBuild(r store.TemplateBuild, now time.Time) bool {
	switch r.State {
	case store.BuildBuilding:
		return now.Sub(r.UpdatedAt) > buildLostAfter
	case store.BuildWaiting:
		return now.Sub(r.CreatedAt) > unstartedTTL
	}
	return false
}

// markLost removes lost build r's sandbox and records its failure; it
// returns the record as stored then (another reader may have marked it
// first).
func (b *templateBuilds) markLost(ctx context.Context, r store.TemplateBuild) (store.TemplateBuild, error) {
	if r.SandboxID != "" && b.deleteSandbox != nil {
		err := b.deleteSandbox(ctx, r.TenantID, r.SandboxID)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			b.logger.Warn("e2b template build: remove the sandbox of a lost build", "build", r.ID, "sandbox", r.SandboxID, "err", err)
		}
	}
	msg := reasonRestarted
	if r.State == store.BuildWaiting {
		msg = fmt.Sprintf("the build was not started within %s of its request: build again", unstartedTTL)
	}
	reason, _ := json.Marshal(buildReason{Message: msg, Step: "base", LogEntries: []logEntry{}})
	lost := r
	lost.State, lost.Reason, lost.SandboxID = store.BuildError, string(reason), ""
	err := b.st.UpdateTemplateBuild(ctx, lost)
	if errors.Is(err, errdefs.ErrConflict) {
		return b.st.GetTemplateBuild(ctx, r.ID)
	}
	if err != nil {
		return r, err
	}
	return b.st.GetTemplateBuild(ctx, r.ID)
}

// trackedBackend is a build's Backend that records the build sandbox on
// the build's record as soon as it exists, and clears it once deleted.
type trackedBackend struct {
	imagebuild.Backend
	track func(id string)
	// stopping is done once the server stops (StopBuilds).
	stopping context.Context
}

// stopDeleteWait bounds the removal of a build sandbox while the server
// stops: its reconciler, which finishes a delete, stops with it, so the
// API would hold the answer for its whole wait (2 minutes) and the stop
// with it. The delete is recorded (the sandbox deleting) as soon as it is
// asked for, and the restarted server's reconciler finishes it.
const stopDeleteWait = 5 * time.Second

func (t trackedBackend) CreateSandbox(ctx context.Context, req sandboxv1.CreateSandboxRequest) (string, error) {
	id, err := t.Backend.CreateSandbox(ctx, req)
	if id != "" {
		t.track(id)
	}
	return id, err
}

func (t trackedBackend) ForkSandbox(ctx context.Context, holder, snapshot, timeout string) (string, error) {
	id, err := t.Backend.ForkSandbox(ctx, holder, snapshot, timeout)
	if id != "" {
		t.track(id)
	}
	return id, err
}

func (t trackedBackend) DeleteSandbox(ctx context.Context, id string) error {
	if t.stopping.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, stopDeleteWait)
		defer cancel()
	}
	err := t.Backend.DeleteSandbox(ctx, id)
	if err == nil {
		t.track("")
	}
	return err
}

// trackedCache keeps the step cache of a Backend that has one.
type trackedCache struct {
	trackedBackend
	imagebuild.Cache
}

// tracked is backend with its sandboxes recorded on tb's record.
func (b *templateBuilds) tracked(ctx context.Context, backend imagebuild.Backend, tb *templateBuild) imagebuild.Backend {
	t := trackedBackend{Backend: backend, stopping: ctx, track: func(id string) {
		b.mu.Lock()
		tb.sandbox = id
		b.mu.Unlock()
		b.save(ctx, tb)
	}}
	if c, ok := backend.(imagebuild.Cache); ok {
		return trackedCache{t, c}
	}
	return t
}

// versionedName is the SPACE template a rebuild of alias makes: the alias
// (cut to leave room), a dot and a random suffix.
func versionedName(alias string) string {
	suffix := "." + sandbox.NewID()[:8]
	return alias[:min(len(alias), maxVersionedPrefix)] + suffix
}

// maxVersionedPrefix leaves a versioned name within SPACE's 63 characters.
const maxVersionedPrefix = 63 - 9

// RunBuildSweep marks lost builds failed, removing their sandboxes, every
// buildLostAfter until ctx is done: so a build whose server died leaves no
// sandbox behind even when no client asks for its status again.
func (a *API) RunBuildSweep(ctx context.Context) {
	t := time.NewTicker(buildLostAfter)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.builds.sweepLost(ctx, time.Now())
		}
	}
}

// sweepLost marks every stored build lost at now that this process does
// not run.
func (b *templateBuilds) sweepLost(ctx context.Context, now time.Time) {
	if b.st == nil {
		return
	}
	running, err := b.st.ListRunningTemplateBuilds(ctx)
	if err != nil {
		b.logger.Warn("e2b template builds: sweep", "err", err)
		return
	}
	for _, r := range running {
		b.mu.Lock()
		_, ours := b.byID[r.ID]
		b.mu.Unlock()
		if ours && r.State == store.BuildBuilding || !lostBuild(r, now) {
			continue
		}
		if _, err := b.markLost(ctx, r); err != nil {
			b.logger.Warn("e2b template builds: sweep", "build", r.ID, "err", err)
		}
	}
}
