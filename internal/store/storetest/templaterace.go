package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// newTemplate stores a ready template called name, as a create checks that
// its sandbox's template exists.
func newTemplate(t *testing.T, s store.Store, name string) {
	t.Helper()
	must(t, "CreateTemplate "+name, s.CreateTemplate(ctx(t), store.Template{Name: name, Source: "builtin:" + name, State: store.TemplateReady, CreatedAt: at(0)}))
}

// templateSandbox is a new sandbox of tenant on template tpl, not yet stored.
func templateSandbox(tenant, tpl string) *sandbox.Sandbox {
	return sandbox.New(tenant, sandbox.Spec{Template: tpl, Runtime: "ns", CPUs: 1, MemoryMiB: 128, DiskMiB: 512}, at(5))
}

// wantTemplateGone fails unless err is the ErrNotFound of a create whose
// template was deleted, and sb was not stored.
func wantTemplateGone(t *testing.T, s store.Store, what string, err error, sb *sandbox.Sandbox) {
	t.Helper()
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), fmt.Sprintf("template %q was deleted while the sandbox was being created", sb.Template)) {
		t.Fatalf("%s: err = %v, want ErrNotFound saying template %q was deleted while the sandbox was being created", what, err, sb.Template)
	}
	if _, gerr := s.GetSandboxByID(ctx(t), sb.ID); !errors.Is(gerr, errdefs.ErrNotFound) {
		t.Errorf("%s: the refused sandbox was stored (GetSandboxByID: %v)", what, gerr)
	}
}

// testCreateAfterTemplateDeleted: a within-quota create whose template was
// deleted since the caller read it writes nothing and is ErrNotFound (with
// or without events, under a quota or none).
func testCreateAfterTemplateDeleted(t *testing.T, s store.Store) {
	tn := newTenant(t, s, "tplgone", at(1))
	limited := newTenant(t, s, "tplgone-quota", at(2))
	must(t, "SetTenantQuota", s.SetTenantQuota(ctx(t), limited.ID, store.Quota{MaxSandboxes: 5}))
	newTemplate(t, s, "kept")
	newTemplate(t, s, "gone")
	must(t, "DeleteTemplate gone", s.DeleteTemplate(ctx(t), "gone"))

	for _, tenant := range []string{tn.ID, limited.ID} {
		sb := templateSandbox(tenant, "gone")
		wantTemplateGone(t, s, "CreateSandboxWithinQuota", s.CreateSandboxWithinQuota(ctx(t), sb), sb)
	}
	stopped := templateSandbox(tn.ID, "gone")
	stopped.State = sandbox.StateStopped // holds no resources: not admitted, still checked
	wantTemplateGone(t, s, "CreateSandboxWithinQuota stopped", s.CreateSandboxWithinQuota(ctx(t), stopped), stopped)
	if se, ok := s.(store.SandboxEvents); ok {
		sb := templateSandbox(tn.ID, "gone")
		err := se.CreateSandboxWithinQuotaAndEvents(ctx(t), sb, []store.Event{{SandboxID: sb.ID, Type: "scheduled", Message: "s"}})
		wantTemplateGone(t, s, "CreateSandboxWithinQuotaAndEvents", err, sb)
		if list, err := s.ListEvents(ctx(t), sb.ID); err != nil || len(list) != 0 {
			t.Errorf("events of a create whose template was deleted: %+v, %v; want none", list, err)
		}
	}
	list, err := s.ListSandboxes(ctx(t), store.SandboxFilter{})
	must(t, "ListSandboxes", err)
	if len(list) != 0 {
		t.Fatalf("sandboxes after refused creates = %d, want none", len(list))
	}

	// The template that is still there admits, and then cannot be deleted.
	kept := templateSandbox(limited.ID, "kept")
	must(t, "CreateSandboxWithinQuota kept", s.CreateSandboxWithinQuota(ctx(t), kept))
	wantClass(t, "DeleteTemplate in use", s.DeleteTemplate(ctx(t), "kept"), errdefs.ErrConflict)
}

// testTemplateDeleteRacesCreates races a template's delete with creates of
// sandboxes on it, round after round: either the delete wins and no create
// is stored, or a create wins and the delete is refused. Never both, which
// would leave sandboxes on a template that is gone.
func testTemplateDeleteRacesCreates(t *testing.T, s store.Store) {
	const rounds, creates = 14, 6
	tn := newTenant(t, s, "tplrace", at(1))
	deleteWon := 0
	for round := range rounds {
		name := fmt.Sprintf("race-%d", round)
		newTemplate(t, s, name)
		errs := make([]error, creates)
		var delErr error
		var wg sync.WaitGroup
		// The delete starts before the first create, the last, or any
		// between, so that rounds see each order.
		for i := range creates + 1 {
			if i == round%(creates+1) {
				wg.Go(func() { delErr = s.DeleteTemplate(ctx(t), name) })
			}
			if i < creates {
				wg.Go(func() { errs[i] = s.CreateSandboxWithinQuota(ctx(t), templateSandbox(tn.ID, name)) })
			}
		}
		wg.Wait()
		stored := 0
		for _, err := range errs {
			switch {
			case err == nil:
				stored++
			case errors.Is(err, errdefs.ErrNotFound):
			default:
				t.Errorf("round %d: create: %v (want success or ErrNotFound)", round, err)
			}
		}
		list, err := s.ListSandboxes(ctx(t), store.SandboxFilter{})
		must(t, "ListSandboxes", err)
		onTemplate := 0
		for _, sb := range list {
			if sb.Template == name {
				onTemplate++
			}
		}
		switch {
		case delErr == nil:
			deleteWon++
			if onTemplate != 0 || stored != 0 {
				t.Fatalf("round %d: template %s deleted, yet %d creates succeeded and %d sandboxes use it", round, name, stored, onTemplate)
			}
		case errors.Is(delErr, errdefs.ErrConflict):
			if onTemplate == 0 || onTemplate != stored {
				t.Fatalf("round %d: delete refused as in use, %d creates succeeded, %d sandboxes use it", round, stored, onTemplate)
			}
		default:
			t.Fatalf("round %d: DeleteTemplate: %v (want success or ErrConflict)", round, delErr)
		}
	}
	t.Logf("%d of %d rounds: the delete won", deleteWon, rounds)
}
