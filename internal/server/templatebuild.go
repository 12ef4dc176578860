package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/progress"
	"github.com/spacesandbox/space/internal/store"
)

// Template builds: the REST API (internal/restapi) records a template and
// asks for its build through restapi.Host; the builds run here, one at a
// time, on every live node (a snapshot:ID source only on the snapshot's
// node).

// templateJobs is the queue of template builds; RunTemplateBuilds drains it.
type templateJob struct{ name, source string }

// EnsureTemplate records a template and queues its build unless it is already
// ready or building. The server calls it at start for the built-in templates.
func (s *Server) EnsureTemplate(ctx context.Context, name, source string) error {
	t, err := s.store.GetTemplate(ctx, name)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		now := time.Now().UTC()
		t = store.Template{Name: name, Source: source, State: store.TemplateBuilding, CreatedAt: now, UpdatedAt: now}
		if err := s.store.CreateTemplate(ctx, t); err != nil {
			return err
		}
	case err != nil:
		return err
	case t.State == store.TemplateReady:
		return nil
	default:
		// Building (interrupted by a restart) or failed: build again.
		t.State, t.Reason, t.Source, t.Node = store.TemplateBuilding, "", source, ""
		if err := s.store.UpdateTemplate(ctx, t); err != nil {
			return err
		}
	}
	s.recordBuildProgress(ctx, name, progress.Report{Phase: "build", Message: "queued"})
	select {
	case s.templateJobs <- templateJob{name, source}:
		return nil
	default:
		return fmt.Errorf("%w: too many template builds queued; retry later", errdefs.ErrNoCapacity)
	}
}

// RunTemplateBuilds builds queued templates one at a time on every live node
// until ctx is done.
func (s *Server) RunTemplateBuilds(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case job := <-s.templateJobs:
			s.buildTemplate(ctx, job)
		}
	}
}

func (s *Server) buildTemplate(ctx context.Context, job templateJob) {
	start := time.Now()
	size, only, err := s.buildOnNodes(ctx, job)
	t, gerr := s.store.GetTemplate(ctx, job.name)
	if gerr != nil {
		s.log.Warn("template vanished during its build", "name", job.name, "err", gerr)
		return
	}
	if err != nil {
		t.State, t.Reason = store.TemplateFailed, err.Error()
		s.log.Error("template build failed", "name", job.name, "source", job.source, "err", err)
	} else {
		// A template from a node-local source exists on that node alone:
		// its sandboxes are placed there (service.templateNodes).
		t.State, t.Reason, t.SizeBytes, t.Node = store.TemplateReady, "", size, only
		s.log.Info("template ready", "name", job.name, "took", time.Since(start).Round(time.Millisecond))
	}
	if err := s.store.UpdateTemplate(context.WithoutCancel(ctx), t); err != nil {
		s.log.Warn("record template state", "name", job.name, "err", err)
	}
}

// buildOnNodes builds job on every live node, or on the one node that has
// its source (returned, "" for every node).
func (s *Server) buildOnNodes(ctx context.Context, job templateJob) (int64, string, error) {
	only, err := s.sourceNode(ctx, job.source)
	if err != nil {
		return 0, "", err
	}
	deadline := time.Now().Add(time.Minute)
	// unavailable is the last round's failure when every node it built on
	// was unavailable (its node-manager died mid-build or is restarting):
	// the build is tried again, up to buildAttempts rounds, each waiting
	// up to a minute for a live node.
	var unavailable error
	attempts := 0
	for {
		all, err := s.store.ListNodes(ctx)
		if err != nil {
			return 0, "", err
		}
		nodes := buildNodes(all, only, time.Now())
		var built int
		var size int64
		var errs []error
		for _, n := range nodes {
			c, err := s.nodes.client(n.ID)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			s.log.Info("building template", "name", job.name, "source", job.source, "node", n.ID)
			limit := progress.Limiter{Throttle: progress.Throttle{Every: templateProgressEvery}}
			ready, err := c.EnsureTemplateProgress(ctx, job.name, job.source, func(p nodev1.Progress) {
				if r := progress.Report(p); limit.Allow(r) {
					s.recordBuildProgress(ctx, job.name, r)
				}
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("node %s: %w", n.ID, err))
				continue
			}
			if ready.Progress != nil {
				s.recordBuildProgress(ctx, job.name, progress.Report(*ready.Progress))
			}
			built, size = built+1, ready.SizeBytes
		}
		if built > 0 {
			return size, only, nil
		}
		if len(errs) > 0 {
			attempts++
			err := errors.Join(errs...)
			if !retryBuild(errs, attempts) {
				return 0, "", err
			}
			s.log.Warn("template build: no node could build it now; trying again", "name", job.name, "attempt", attempts, "err", err)
			unavailable, deadline = err, time.Now().Add(time.Minute)
		}
		// No node has registered yet (the server just started), the
		// snapshot's node is back soon, or the node-manager of the one
		// that was building is being restarted: wait.
		if time.Now().After(deadline) {
			if unavailable != nil {
				return 0, "", unavailable
			}
			if only != "" {
				return 0, "", fmt.Errorf("%w: template source %s: node %s, which holds the snapshot, is not live; build again once it is", errdefs.ErrUnavailable, job.source, only)
			}
			return 0, "", fmt.Errorf("no live node to build on")
		}
		wait := 200 * time.Millisecond
		if len(errs) > 0 {
			wait = buildRetryWait
		}
		select {
		case <-ctx.Done():
			return 0, "", ctx.Err()
		case <-time.After(wait):
		}
	}
}

// buildAttempts bounds the rounds of a template build whose nodes were all
// unavailable: a build that kills its node-manager each time (a source too
// big for the node) is not run forever.
const buildAttempts = 3

// buildRetryWait is the pause between two rounds of a build whose nodes
// were unavailable.
const buildRetryWait = time.Second

// retryBuild reports whether a build round that failed on every node with
// errs, the attempts-th, is tried again: only when each failure is
// Unavailable (the node or its node-manager went away, and the build is
// repeatable: the node-manager clears an unsealed leftover), and fewer
// than buildAttempts rounds have run.
func retryBuild(errs []error, attempts int) bool {
	if attempts >= buildAttempts || len(errs) == 0 {
		return false
	}
	for _, err := range errs {
		if !errors.Is(err, errdefs.ErrUnavailable) {
			return false
		}
	}
	return true
}

// sourceNode is the one node a build of source can run on, or "" for any
// node: a snapshot:ID source is the tree of a disk snapshot, which only the
// node holding it has (another node would fail to find it, and a build that
// succeeded there alone must not count as the template being built).
func (s *Server) sourceNode(ctx context.Context, source string) (string, error) {
	id, ok := strings.CutPrefix(source, "snapshot:")
	if !ok {
		return "", nil
	}
	snap, err := s.store.GetSnapshot(ctx, "", id)
	if err != nil {
		return "", fmt.Errorf("template source %s: %w", source, err)
	}
	if snap.Node == "" {
		return "", fmt.Errorf("%w: template source %s: the snapshot's files are on no node (only in object storage); build from a snapshot still on its node", errdefs.ErrFailedPrecondition, source)
	}
	return snap.Node, nil
}

// buildNodes is the nodes of all a build runs on at now: the live ones
// (ready, heard from within 15s), only node only when it is set.
func buildNodes(all []store.Node, only string, now time.Time) []store.Node {
	var out []store.Node
	for _, n := range all {
		if n.State != store.NodeReady || now.Sub(n.LastHeartbeat) > 15*time.Second {
			continue
		}
		if only != "" && n.ID != only {
			continue
		}
		out = append(out, n)
	}
	return out
}

// templateProgressEvery is the least time between two writes of a
// building template's progress to its record.
const templateProgressEvery = time.Second

// recordBuildProgress stores a reading of template name's build on its record.
func (s *Server) recordBuildProgress(ctx context.Context, name string, r progress.Report) {
	b, err := json.Marshal(r)
	if err == nil {
		err = s.store.SetTemplateProgress(context.WithoutCancel(ctx), name, string(b))
	}
	if err != nil {
		s.log.Warn("record template build progress", "name", name, "err", err)
	}
}

// deleteTemplateOnNodes removes template name from every registered node
// it can reach, best effort: a node's refusal is logged.
func (s *Server) deleteTemplateOnNodes(ctx context.Context, name string) {
	nodes, err := s.store.ListNodes(ctx)
	if err != nil {
		return
	}
	for _, n := range nodes {
		if c, err := s.nodes.client(n.ID); err == nil {
			if err := c.DeleteTemplate(ctx, name); err != nil {
				s.log.Warn("delete template on node", "name", name, "node", n.ID, "err", err)
			}
		}
	}
}
