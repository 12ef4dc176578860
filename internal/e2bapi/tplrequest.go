package e2bapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/imagebuild"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
)

// A build request names the template (its E2B alias), its tags and the
// size of its sandboxes; buildTarget decides which SPACE template the
// build makes (a rebuild's is a new one, tplbuild.go).

// buildRequest is the body of POST /v3/templates (and POST /templates,
// v2).
type buildRequest struct {
	Name  string   `json:"name"`
	Alias string   `json:"alias"`
	Tags  []string `json:"tags"`
	// CPUCount and MemoryMB size the sandboxes made from the template
	// through the E2B API (E2B's template size).
	CPUCount *int `json:"cpuCount"`
	MemoryMB *int `json:"memoryMB"`
}

// sizeOf checks req's size against SPACE's sandbox bounds; 0 is the
// server's default.
func sizeOf(req buildRequest) (cpus, memoryMiB int, err error) {
	if req.CPUCount != nil {
		if cpus = *req.CPUCount; cpus < sandbox.MinCPUs || cpus > sandbox.MaxCPUs {
			return 0, 0, fmt.Errorf("%w: cpuCount %d: SPACE sandboxes have %d to %d CPUs", errdefs.ErrInvalidArgument, cpus, sandbox.MinCPUs, sandbox.MaxCPUs)
		}
	}
	if req.MemoryMB != nil {
		if memoryMiB = *req.MemoryMB; memoryMiB < sandbox.MinMemoryMiB || memoryMiB > sandbox.MaxMemoryMiB {
			return 0, 0, fmt.Errorf("%w: memoryMB %d: SPACE sandboxes have %d to %d MiB", errdefs.ErrInvalidArgument, memoryMiB, sandbox.MinMemoryMiB, sandbox.MaxMemoryMiB)
		}
	}
	return cpus, memoryMiB, nil
}

// handleTemplateRequest serves POST /v3/templates (and POST /templates,
// v2): a new build of template name, or a rebuild of the caller's.
func (a *API) handleTemplateRequest(w http.ResponseWriter, r *http.Request) {
	var req buildRequest
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
	}
	if err := defaultTagOnly(append([]string{tag}, req.Tags...)); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if err := sandbox.ValidateTemplateName(name); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	cpus, mem, err := sizeOf(req)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	backend, err := a.host.BuildBackend(r)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	template, err := a.buildTarget(r.Context(), backend, c.Tenant, name)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	tb, err := a.builds.add(r.Context(), newBuild{tenant: c.Tenant, alias: name, template: template, cpus: cpus, memoryMiB: mem}, time.Now())
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"templateID": name, "buildID": tb.id, "tags": []string{defaultTag}, "aliases": []string{name}, "public": false})
}

// buildTarget is the SPACE template a build of alias by tenant makes:
// alias itself while that name is free; a new versioned name when
// tenant's build made the template alias stands for (a rebuild replaces
// it once it is ready). A template of that name that another tenant's
// build made, or that was not built through the E2B API, is never
// touched: the build is refused.
func (a *API) buildTarget(ctx context.Context, backend imagebuild.Backend, tenant, alias string) (string, error) {
	cur, err := a.currentBuild(ctx, alias)
	if err != nil {
		return "", err
	}
	switch {
	case cur != nil && cur.TenantID != tenant:
		return "", fmt.Errorf("%w: template %s was built by another tenant: a build under its name would replace it; pick another name", errdefs.ErrConflict, service.Clip(alias))
	case cur != nil:
		return versionedName(alias), nil
	}
	taken, err := backend.TemplateTaken(ctx, alias)
	if err != nil {
		return "", err
	}
	if taken {
		return "", fmt.Errorf("%w: template %s exists and was not built through the E2B API (space template build made it), so a build does not replace it; delete it first (space template delete %s) or pick another name", errdefs.ErrConflict, service.Clip(alias), service.Clip(alias))
	}
	return alias, nil
}
