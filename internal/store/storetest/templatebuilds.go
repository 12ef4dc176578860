package storetest

import (
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// testTemplateBuilds: a build reads back as written, a duplicate id is
// refused, the builds of an alias list newest first across tenants (and
// no other alias's), an update rewrites state, reason, sandbox and
// template and moves UpdatedAt, a final build refuses every later update,
// the running builds list oldest first without the final ones, and a
// deleted build is gone.
func testTemplateBuilds(t *testing.T, s store.Store) {
	_, err := s.GetTemplateBuild(ctx(t), "bld-none")
	wantClass(t, "GetTemplateBuild of an unknown id", err, errdefs.ErrNotFound)
	wantClass(t, "CreateTemplateBuild with no alias", s.CreateTemplateBuild(ctx(t), store.TemplateBuild{ID: "bld-x", TenantID: "tn-1", Template: "t"}), errdefs.ErrInvalidArgument)

	first := store.TemplateBuild{ID: "bld-1", TenantID: "tn-a", Alias: "web", Template: "web", State: store.BuildWaiting,
		CPUs: 4, MemoryMiB: 2048, CreatedAt: at(1)}
	second := store.TemplateBuild{ID: "bld-2", TenantID: "tn-b", Alias: "web", Template: "web.v2", State: store.BuildBuilding, CreatedAt: at(2)}
	other := store.TemplateBuild{ID: "bld-3", TenantID: "tn-a", Alias: "db", Template: "db", State: store.BuildWaiting, CreatedAt: at(3)}
	for _, b := range []store.TemplateBuild{first, second, other} {
		must(t, "CreateTemplateBuild "+b.ID, s.CreateTemplateBuild(ctx(t), b))
	}
	wantClass(t, "CreateTemplateBuild duplicate", s.CreateTemplateBuild(ctx(t), first), errdefs.ErrConflict)

	got, err := s.GetTemplateBuild(ctx(t), first.ID)
	must(t, "GetTemplateBuild", err)
	if got.TenantID != first.TenantID || got.Alias != "web" || got.Template != "web" || got.State != store.BuildWaiting ||
		got.CPUs != 4 || got.MemoryMiB != 2048 || !got.CreatedAt.Equal(at(1)) || got.UpdatedAt.IsZero() || got.Reason != "" || got.SandboxID != "" {
		t.Errorf("GetTemplateBuild = %+v, want %+v with an UpdatedAt", got, first)
	}

	list, err := s.ListTemplateBuilds(ctx(t), "web")
	must(t, "ListTemplateBuilds", err)
	if len(list) != 2 || list[0].ID != second.ID || list[1].ID != first.ID {
		t.Errorf("ListTemplateBuilds(web) = %+v, want bld-2 then bld-1", list)
	}
	if none, err := s.ListTemplateBuilds(ctx(t), "nothing"); err != nil || none == nil || len(none) != 0 {
		t.Errorf("ListTemplateBuilds of an unknown alias = %#v, %v; want empty non-nil", none, err)
	}

	running, err := s.ListRunningTemplateBuilds(ctx(t))
	must(t, "ListRunningTemplateBuilds", err)
	if len(running) != 3 || running[0].ID != first.ID || running[1].ID != second.ID || running[2].ID != other.ID {
		t.Errorf("ListRunningTemplateBuilds = %+v, want bld-1, bld-2, bld-3", running)
	}

	upd := got
	upd.State, upd.SandboxID, upd.Template = store.BuildBuilding, "sb-build", "web.v1"
	must(t, "UpdateTemplateBuild", s.UpdateTemplateBuild(ctx(t), upd))
	got2, err := s.GetTemplateBuild(ctx(t), first.ID)
	must(t, "GetTemplateBuild after an update", err)
	if got2.State != store.BuildBuilding || got2.SandboxID != "sb-build" || got2.Template != "web.v1" || got2.CPUs != 4 || got2.UpdatedAt.Before(got.UpdatedAt) {
		t.Errorf("after UpdateTemplateBuild = %+v, want building in sb-build as web.v1, UpdatedAt not before %v", got2, got.UpdatedAt)
	}

	upd.State, upd.Reason, upd.SandboxID = store.BuildError, `{"message":"lost"}`, ""
	must(t, "UpdateTemplateBuild to error", s.UpdateTemplateBuild(ctx(t), upd))
	late := upd
	late.State, late.Reason = store.BuildReady, ""
	wantClass(t, "UpdateTemplateBuild of a final build", s.UpdateTemplateBuild(ctx(t), late), errdefs.ErrConflict)
	if got3, err := s.GetTemplateBuild(ctx(t), first.ID); err != nil || got3.State != store.BuildError || got3.Reason != `{"message":"lost"}` {
		t.Errorf("a final build after a refused update = %+v, %v; want it in error with its reason", got3, err)
	}
	if running, err := s.ListRunningTemplateBuilds(ctx(t)); err != nil || len(running) != 2 || running[0].ID != second.ID {
		t.Errorf("ListRunningTemplateBuilds after one failed = %+v, %v; want bld-2, bld-3", running, err)
	}
	wantClass(t, "UpdateTemplateBuild of an unknown id", s.UpdateTemplateBuild(ctx(t), store.TemplateBuild{ID: "bld-none", State: store.BuildReady}), errdefs.ErrNotFound)

	must(t, "DeleteTemplateBuild", s.DeleteTemplateBuild(ctx(t), first.ID))
	_, err = s.GetTemplateBuild(ctx(t), first.ID)
	wantClass(t, "GetTemplateBuild of a deleted build", err, errdefs.ErrNotFound)
	wantClass(t, "DeleteTemplateBuild again", s.DeleteTemplateBuild(ctx(t), first.ID), errdefs.ErrNotFound)
}
