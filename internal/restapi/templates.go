package restapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/service"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/progress"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

func (a *API) handleListTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := a.store.ListTemplates(r.Context())
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := sandboxv1.TemplateList{Templates: []sandboxv1.Template{}}
	for _, t := range ts {
		out.Templates = append(out.Templates, templateAPI(t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) handleBuildTemplate(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.BuildTemplateRequest
	if err := decodeJSON(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	if err := sandbox.ValidateTemplateName(req.Name); err != nil {
		a.writeError(w, r, err)
		return
	}
	source, err := a.normaliseSource(r.Context(), a.caller(r), req.From)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	var policy *egress.Policy
	if len(req.Egress) > 0 && string(req.Egress) != "null" {
		if policy, err = egress.ParsePolicy(req.Egress); err != nil {
			a.writeError(w, r, fmt.Errorf("%w: egress: %v", errdefs.ErrInvalidArgument, err))
			return
		}
	}
	if t, err := a.store.GetTemplate(r.Context(), req.Name); err == nil && t.State == store.TemplateBuilding {
		a.writeError(w, r, fmt.Errorf("%w: template %s is already building", errdefs.ErrConflict, req.Name))
		return
	} else if err == nil && t.State == store.TemplateReady {
		a.writeError(w, r, fmt.Errorf("%w: template %s exists; delete it first", errdefs.ErrConflict, req.Name))
		return
	}
	if err := a.host.EnsureTemplate(r.Context(), req.Name, source); err != nil {
		a.writeError(w, r, err)
		return
	}
	if policy != nil {
		if err := a.store.SetTemplateEgress(r.Context(), req.Name, string(sandbox.EgressJSON(policy))); err != nil {
			a.writeError(w, r, err)
			return
		}
	}
	t, err := a.store.GetTemplate(r.Context(), req.Name)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, templateAPI(t))
}

// handleSetTemplateEgress serves PUT /v1/templates/{name}/egress: the body
// is the default egress policy of sandboxes made from the template from now
// on, or null to remove it. Existing sandboxes keep theirs.
func (a *API) handleSetTemplateEgress(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	if err := decodeJSON(w, r, &raw); err != nil {
		a.writeError(w, r, err)
		return
	}
	value := ""
	if len(raw) > 0 && string(raw) != "null" {
		p, err := egress.ParsePolicy(raw)
		if err != nil {
			a.writeError(w, r, fmt.Errorf("%w: egress: %v", errdefs.ErrInvalidArgument, err))
			return
		}
		value = string(sandbox.EgressJSON(p))
	}
	name := r.PathValue("name")
	if err := a.store.SetTemplateEgress(r.Context(), name, value); err != nil {
		a.writeError(w, r, err)
		return
	}
	t, err := a.store.GetTemplate(r.Context(), name)
	if err != nil {
		a.writeError(w, r, err)
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

// normaliseSource checks a template source: dir:/abs, tar:/abs,
// oci:/abs[#ref], docker-archive:/abs[#tag], a bare
// absolute path (a directory), debootstrap:SUITE[+pkgs], snapshot:ID (a disk
// snapshot the caller can see, ready), or a built-in name.
func (a *API) normaliseSource(ctx context.Context, c service.Caller, from string) (string, error) {
	if b, ok := a.cfg.Builtins[from]; ok {
		return b, nil
	}
	kind, rest, ok := strings.Cut(from, ":")
	if !ok && strings.HasPrefix(from, "/") {
		kind, rest = "dir", from
	}
	switch kind {
	case "dir", "tar", "oci", "docker-archive":
		if !strings.HasPrefix(rest, "/") || strings.Contains(rest, "\x00") {
			return "", fmt.Errorf("%w: template source %q: want an absolute path on the server's machine", errdefs.ErrInvalidArgument, from)
		}
		return kind + ":" + rest, nil
	case "snapshot":
		// The filesystem of a sandbox's disk snapshot, ns or vm (a
		// Dockerfile build's last step): the caller must be able to see it.
		if !sandbox.ValidSnapshotID(rest) {
			return "", fmt.Errorf("%w: template source %q: want snapshot:ID, the id of a disk snapshot (sn-…)", errdefs.ErrInvalidArgument, from)
		}
		snap, err := a.svc.GetSnapshot(ctx, c, rest)
		if err != nil {
			return "", fmt.Errorf("template source %s: %w", from, err)
		}
		if snap.State != store.SnapshotReady {
			return "", fmt.Errorf("%w: template source %s: the snapshot is %s, not ready", errdefs.ErrFailedPrecondition, from, snap.State)
		}
		return from, nil
	case "debootstrap":
		if rest == "" || strings.ContainsAny(rest, " /\x00") {
			return "", fmt.Errorf("%w: template source %q: want debootstrap:SUITE[+pkg,…]", errdefs.ErrInvalidArgument, from)
		}
		return from, nil
	}
	return "", fmt.Errorf("%w: template source %q: want dir:PATH, tar:PATH, oci:PATH[#REF], docker-archive:PATH[#TAG], debootstrap:SUITE[+pkg,…] snapshot:ID or a built-in (minimal, base)", errdefs.ErrInvalidArgument, from)
}

func (a *API) handleDeleteTemplate(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := sandbox.ValidateTemplateName(name); err != nil {
		a.writeError(w, r, err)
		return
	}
	if err := a.store.DeleteTemplate(r.Context(), name); err != nil {
		a.writeError(w, r, err)
		return
	}
	a.host.DeleteTemplateOnNodes(r.Context(), name)
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
