package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/service"
	"net/http"
	"strings"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/progress"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

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
		t.State, t.Reason, t.Source = store.TemplateBuilding, "", source
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
	size, err := s.buildOnNodes(ctx, job)
	t, gerr := s.store.GetTemplate(ctx, job.name)
	if gerr != nil {
		s.log.Warn("template vanished during its build", "name", job.name, "err", gerr)
		return
	}
	if err != nil {
		t.State, t.Reason = store.TemplateFailed, err.Error()
		s.log.Error("template build failed", "name", job.name, "source", job.source, "err", err)
	} else {
		t.State, t.Reason, t.SizeBytes = store.TemplateReady, "", size
		s.log.Info("template ready", "name", job.name, "took", time.Since(start).Round(time.Millisecond))
	}
	if err := s.store.UpdateTemplate(context.WithoutCancel(ctx), t); err != nil {
		s.log.Warn("record template state", "name", job.name, "err", err)
	}
}

func (s *Server) buildOnNodes(ctx context.Context, job templateJob) (int64, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		nodes, err := s.store.ListNodes(ctx)
		if err != nil {
			return 0, err
		}
		var built int
		var size int64
		var errs []error
		for _, n := range nodes {
			if n.State != store.NodeReady || time.Since(n.LastHeartbeat) > 15*time.Second {
				continue
			}
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
			return size, nil
		}
		if len(errs) > 0 {
			return 0, errors.Join(errs...)
		}
		// No node has registered yet (the server just started): wait.
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no live node to build on")
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
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

func (s *Server) handleListTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := s.store.ListTemplates(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := sandboxv1.TemplateList{Templates: []sandboxv1.Template{}}
	for _, t := range ts {
		out.Templates = append(out.Templates, templateAPI(t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleBuildTemplate(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.BuildTemplateRequest
	if err := decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := sandbox.ValidateTemplateName(req.Name); err != nil {
		s.writeError(w, r, err)
		return
	}
	source, err := s.normaliseSource(req.From)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var policy *egress.Policy
	if len(req.Egress) > 0 && string(req.Egress) != "null" {
		if policy, err = egress.ParsePolicy(req.Egress); err != nil {
			s.writeError(w, r, fmt.Errorf("%w: egress: %v", errdefs.ErrInvalidArgument, err))
			return
		}
	}
	if t, err := s.store.GetTemplate(r.Context(), req.Name); err == nil && t.State == store.TemplateBuilding {
		s.writeError(w, r, fmt.Errorf("%w: template %s is already building", errdefs.ErrConflict, req.Name))
		return
	} else if err == nil && t.State == store.TemplateReady {
		s.writeError(w, r, fmt.Errorf("%w: template %s exists; delete it first", errdefs.ErrConflict, req.Name))
		return
	}
	if err := s.EnsureTemplate(r.Context(), req.Name, source); err != nil {
		s.writeError(w, r, err)
		return
	}
	if policy != nil {
		if err := s.store.SetTemplateEgress(r.Context(), req.Name, string(sandbox.EgressJSON(policy))); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	t, err := s.store.GetTemplate(r.Context(), req.Name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, templateAPI(t))
}

// handleSetTemplateEgress serves PUT /v1/templates/{name}/egress: the body
// is the default egress policy of sandboxes made from the template from now
// on, or null to remove it. Existing sandboxes keep theirs.
func (s *Server) handleSetTemplateEgress(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	if err := decodeJSON(w, r, &raw); err != nil {
		s.writeError(w, r, err)
		return
	}
	value := ""
	if len(raw) > 0 && string(raw) != "null" {
		p, err := egress.ParsePolicy(raw)
		if err != nil {
			s.writeError(w, r, fmt.Errorf("%w: egress: %v", errdefs.ErrInvalidArgument, err))
			return
		}
		value = string(sandbox.EgressJSON(p))
	}
	name := r.PathValue("name")
	if err := s.store.SetTemplateEgress(r.Context(), name, value); err != nil {
		s.writeError(w, r, err)
		return
	}
	t, err := s.store.GetTemplate(r.Context(), name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, templateAPI(t))
}

// templateAPI is a template as the API shows it.
func templateAPI(t store.Template) sandboxv1.Template {
	out := sandboxv1.Template{Name: t.Name, Source: t.Source, State: string(t.State), Reason: t.Reason, SizeBytes: t.SizeBytes, CreatedAt: t.CreatedAt}
	if p, err := service.TemplateEgress(t); err == nil && p != nil {
		out.Egress = sandbox.EgressAPI(p)
	}
	out.Progress = progressAPI(t.Progress)
	return out
}

// normaliseSource checks a template source: dir:/abs, tar:/abs, a bare
// absolute path (a directory), debootstrap:SUITE[+pkgs], or a built-in name.
func (s *Server) normaliseSource(from string) (string, error) {
	if b, ok := s.cfg.Builtins[from]; ok {
		return b, nil
	}
	kind, rest, ok := strings.Cut(from, ":")
	if !ok && strings.HasPrefix(from, "/") {
		kind, rest = "dir", from
	}
	switch kind {
	case "dir", "tar":
		if !strings.HasPrefix(rest, "/") || strings.Contains(rest, "\x00") {
			return "", fmt.Errorf("%w: template source %q: want an absolute path on the server's machine", errdefs.ErrInvalidArgument, from)
		}
		return kind + ":" + rest, nil
	case "debootstrap":
		if rest == "" || strings.ContainsAny(rest, " /\x00") {
			return "", fmt.Errorf("%w: template source %q: want debootstrap:SUITE[+pkg,…]", errdefs.ErrInvalidArgument, from)
		}
		return from, nil
	}
	return "", fmt.Errorf("%w: template source %q: want dir:PATH, tar:PATH, debootstrap:SUITE[+pkg,…] or a built-in (minimal, base)", errdefs.ErrInvalidArgument, from)
}

func (s *Server) handleDeleteTemplate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := sandbox.ValidateTemplateName(name); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.store.DeleteTemplate(r.Context(), name); err != nil {
		s.writeError(w, r, err)
		return
	}
	nodes, err := s.store.ListNodes(r.Context())
	if err == nil {
		for _, n := range nodes {
			if c, err := s.nodes.client(n.ID); err == nil {
				if err := c.DeleteTemplate(r.Context(), name); err != nil {
					s.log.Warn("delete template on node", "name", name, "node", n.ID, "err", err)
				}
			}
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// progressAPI is a stored reading (JSON of a progress.Report) as the API
// shows it; nil for none or one that does not decode.
func progressAPI(stored string) *sandboxv1.Progress {
	if stored == "" {
		return nil
	}
	var r progress.Report
	if err := json.Unmarshal([]byte(stored), &r); err != nil {
		return nil
	}
	p := sandboxv1.Progress(r)
	return &p
}
