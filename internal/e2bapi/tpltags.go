package e2bapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/imagebuild"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// An E2B template name is an alias: it stands for its latest ready build
// (store.TemplateBuild), whose SPACE template a create through the E2B API
// starts. E2B's tags name other builds of a template; SPACE keeps one, the
// latest, under the tag "default", and refuses any other tag by name.
// A name no build made stands for the SPACE template of that name.

// defaultTag is the one tag SPACE has: a template's latest build.
const defaultTag = "default"

// maxKeptBuilds is how many finished builds of an alias and tenant stay
// recorded besides the latest; older ones are removed as a build ends.
const maxKeptBuilds = 10

// errTags refuses a tag other than the default.
func errTags(tag string) error {
	return fmt.Errorf("%w: template tag %q: template tags other than %q are not supported by SPACE: a template has one build, its latest, tagged %q; build under another name to keep another version (docs/e2b.md)",
		errdefs.ErrInvalidArgument, service.Clip(tag), defaultTag, defaultTag)
}

// defaultTagOnly refuses tags with one that is neither "" nor the default.
func defaultTagOnly(tags []string) error {
	for _, t := range tags {
		if t != "" && t != defaultTag {
			return errTags(t)
		}
	}
	return nil
}

// currentBuild is the build alias stands for: its latest ready one, of
// any tenant; nil when no build made it (or the builds are not recorded).
func (a *API) currentBuild(ctx context.Context, alias string) (*store.TemplateBuild, error) {
	if a.builds.st == nil {
		return nil, nil
	}
	list, err := a.builds.st.ListTemplateBuilds(ctx, alias)
	if err != nil {
		return nil, err
	}
	var cur *store.TemplateBuild
	for i := range list {
		if b := &list[i]; b.State == store.BuildReady && (cur == nil || b.UpdatedAt.After(cur.UpdatedAt)) {
			cur = b
		}
	}
	return cur, nil
}

// e2bTemplateOf is what a create through the E2B API of templateID by
// tenant starts: the SPACE template of tenant's latest ready build of
// alias templateID with its size (service.AliasBuild, which SPACE's own
// create resolves a name with too), or the template named templateID (the
// code interpreter's aliases map to SPACE's code-interpreter template).
func (a *API) e2bTemplateOf(ctx context.Context, tenant, templateID string) (name string, cpus, memoryMiB int, err error) {
	var cur *store.TemplateBuild
	if a.builds.st != nil {
		if cur, err = service.AliasBuild(ctx, a.builds.st, tenant, templateID); err != nil {
			return "", 0, 0, err
		}
	}
	if cur == nil {
		return e2bTemplate(templateID), 0, 0, nil
	}
	return cur.Template, cur.CPUs, cur.MemoryMiB, nil
}

// handleTemplateAlias serves GET /templates/aliases/{alias}: 200 when a
// build made the alias or a template of that name exists, 404 when the
// name is free.
func (a *API) handleTemplateAlias(w http.ResponseWriter, r *http.Request) {
	alias := r.PathValue("alias")
	cur, err := a.currentBuild(r.Context(), alias)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if cur == nil {
		backend, err := a.host.BuildBackend(r)
		if err != nil {
			a.writeE2BErr(w, r, err)
			return
		}
		taken, err := backend.TemplateTaken(r.Context(), alias)
		if err != nil {
			a.writeE2BErr(w, r, err)
			return
		}
		if !taken {
			writeE2BError(w, http.StatusNotFound, "no template "+service.Clip(alias))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": alias, "public": true})
}

// handleTemplateSub serves GET /templates/{templateID}/{sub}: the tags of
// a template (Template.getTags) when sub is "tags"; E2B's other routes
// under it are refused by name.
func (a *API) handleTemplateSub(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("sub") != "tags" {
		a.e2bLacks(e2bTemplates)(w, r)
		return
	}
	alias := r.PathValue("templateID")
	cur, err := a.currentBuild(r.Context(), alias)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if cur == nil {
		writeE2BError(w, http.StatusNotFound, "no template "+service.Clip(alias)+" built through the E2B API")
		return
	}
	writeJSON(w, http.StatusOK, []map[string]any{{"tag": defaultTag, "buildID": cur.ID, "createdAt": cur.UpdatedAt}})
}

// handleAssignTags serves POST /templates/tags (Template.assignTags):
// the default tag is assigned to the build the target stands for, which
// has it already; any other tag is refused by name.
func (a *API) handleAssignTags(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	if err := decodeE2B(w, r, &req); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	name, tag, _ := strings.Cut(req.Target, ":")
	c := a.host.Caller(r.Context())
	switch {
	case !c.Admin:
		a.writeE2BErr(w, r, fmt.Errorf("%w: tagging a template takes an admin key, as building one does", errdefs.ErrPermissionDenied))
		return
	case name == "" || len(req.Tags) == 0:
		a.writeE2BErr(w, r, fmt.Errorf("%w: want a target template and tags", errdefs.ErrInvalidArgument))
		return
	}
	if err := defaultTagOnly(append([]string{tag}, req.Tags...)); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	cur, err := a.currentBuild(r.Context(), name)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if cur == nil || cur.TenantID != c.Tenant {
		a.writeE2BErr(w, r, fmt.Errorf("%w: template %s has no build of this tenant made through the E2B API", errdefs.ErrNotFound, service.Clip(name)))
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"buildID": cur.ID, "tags": []string{defaultTag}})
}

// templateDeleter is a Backend that can delete a template (the public
// API's DELETE /v1/templates/{name}: refused while a sandbox uses it).
type templateDeleter interface {
	DeleteTemplate(ctx context.Context, name string) error
}

// pruneBuilds runs as tb ends: when it is ready, the templates of the
// tenant's earlier builds of its alias are deleted, each unless a sandbox
// still uses it (it stays, and a later build tries again), with their
// records; of the other finished records the newest maxKeptBuilds stay.
func (a *API) pruneBuilds(ctx context.Context, backend imagebuild.Backend, tb *templateBuild) {
	st := a.builds.st
	if st == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	list, err := st.ListTemplateBuilds(ctx, tb.templateID)
	if err != nil {
		a.log.Warn("e2b template build: prune", "build", tb.id, "err", err)
		return
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].CreatedAt.After(list[j].CreatedAt) })
	del, _ := backend.(templateDeleter)
	a.builds.mu.Lock()
	ready := tb.status == buildReady
	a.builds.mu.Unlock()
	kept := 0
	for _, b := range list {
		if b.ID == tb.id || b.TenantID != tb.tenant || !b.State.Final() {
			continue
		}
		if ready && b.State == store.BuildReady && b.Template != tb.template && del != nil {
			err := del.DeleteTemplate(ctx, b.Template)
			switch {
			case err == nil || errors.Is(err, errdefs.ErrNotFound):
				a.builds.log(tb, "info", "removed template "+b.Template+" of the replaced build "+b.ID)
			default:
				a.builds.log(tb, "info", "the replaced build's template "+b.Template+" stays: "+err.Error())
				continue
			}
		} else if b.State == store.BuildReady || kept < maxKeptBuilds {
			// A ready build another build has not replaced yet stays.
			kept++
			continue
		}
		if err := st.DeleteTemplateBuild(ctx, b.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			a.log.Warn("e2b template build: prune", "build", b.ID, "err", err)
		}
	}
}
