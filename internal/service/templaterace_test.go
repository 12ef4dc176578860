package service

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// templateDeletingStore is a store whose within-quota creates first delete
// the sandbox's template, as a `space template delete` (or `template gc`)
// landing between the create's read of its template and its insert would.
// before runs first (for a fork: delete the parent, the template's last
// user). Embedding store.Store hides the SQL store's
// CreateSandboxWithinQuotaAndEvents: creates write the sandbox alone.
type templateDeletingStore struct {
	store.Store
	t       *testing.T
	before  func(ctx context.Context, sb *sandbox.Sandbox) error
	deleted int
}

func (s *templateDeletingStore) deleteTemplate(ctx context.Context, sb *sandbox.Sandbox) {
	if s.before != nil {
		if err := s.before(ctx, sb); err != nil {
			s.t.Errorf("before the create of %s: %v", sb.ID, err)
		}
	}
	if err := s.Store.DeleteTemplate(ctx, sb.Template); err != nil {
		s.t.Errorf("delete template %s before the create of %s: %v", sb.Template, sb.ID, err)
		return
	}
	s.deleted++
}

func (s *templateDeletingStore) CreateSandboxWithinQuota(ctx context.Context, sb *sandbox.Sandbox) error {
	s.deleteTemplate(ctx, sb)
	return s.Store.CreateSandboxWithinQuota(ctx, sb)
}

// templateDeletingEventsStore is templateDeletingStore that writes a
// create's sandbox and events together (the service's path with the SQL
// stores).
type templateDeletingEventsStore struct{ *templateDeletingStore }

func (s templateDeletingEventsStore) CreateSandboxWithinQuotaAndEvents(ctx context.Context, sb *sandbox.Sandbox, events []store.Event) error {
	s.deleteTemplate(ctx, sb)
	return s.Store.(store.SandboxEvents).CreateSandboxWithinQuotaAndEvents(ctx, sb, events)
}

func (s templateDeletingEventsStore) UpdateSandboxAndEvents(ctx context.Context, sb *sandbox.Sandbox, events []store.Event) error {
	return s.Store.(store.SandboxEvents).UpdateSandboxAndEvents(ctx, sb, events)
}

// newIdleService is a service on st whose reconciler never runs: a create
// the store records waits CreateTimeout (a second) and is Unavailable, as
// these tests expect the store to refuse it.
func newIdleService(cfg Config, st store.Store) *Sandboxes {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := reconcile.New(reconcile.Config{Workers: 1, NodeLostAfter: -1, SingleReplica: true}, st,
		func(string) (reconcile.NodeAPI, error) { return nil, errdefs.ErrUnavailable }, log)
	cfg.CreateTimeout = time.Second
	return New(cfg, st, rec, raceBeats{}, time.Now(), log)
}

// wantTemplateDeleted fails unless err is the NotFound of a create whose
// template was deleted while it ran, and tenant has no sandbox left.
func wantTemplateDeleted(t *testing.T, st store.Store, what string, err error, tenant string) {
	t.Helper()
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `template "minimal" was deleted while the sandbox was being created; create it again`) {
		t.Fatalf("%s while its template was deleted: err = %v, want NotFound saying the template was deleted while the sandbox was being created", what, err)
	}
	left, lerr := st.ListSandboxes(t.Context(), store.SandboxFilter{Tenant: tenant})
	if lerr != nil {
		t.Fatal(lerr)
	}
	if len(left) != 0 {
		t.Fatalf("%s refused, yet %d sandbox rows are left (first %s on template %s)", what, len(left), left[0].ID, left[0].Template)
	}
}

// TestCreateWhileTemplateDeleted: a template deleted after a create read
// it (ready) and before the create recorded its sandbox fails the create
// with NotFound saying so, and leaves no sandbox on the deleted template,
// whether the store writes the sandbox with its events or alone.
func TestCreateWhileTemplateDeleted(t *testing.T) {
	for _, together := range []bool{true, false} {
		name := map[bool]string{true: "with events", false: "alone"}[together]
		t.Run(name, func(t *testing.T) {
			db, tenant, _ := newTestStore(t)
			deleting := &templateDeletingStore{Store: db, t: t}
			var st store.Store = deleting
			if together {
				st = templateDeletingEventsStore{deleting}
			}
			if _, ok := st.(store.SandboxEvents); ok != together {
				t.Fatalf("store writes sandbox and events together: %v, want %v", ok, together)
			}
			(&raceEnv{st: db}).putNode(t.Context(), t)
			svc := newIdleService(Config{DefaultRuntime: "ns"}, st)
			_, err := svc.Create(t.Context(), Caller{Tenant: tenant}, CreateParams{CreateSandboxRequest: sandboxv1.CreateSandboxRequest{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}})
			if deleting.deleted != 1 {
				t.Fatalf("the template was deleted %d times before the insert, want once (err %v)", deleting.deleted, err)
			}
			wantTemplateDeleted(t, db, "create", err, tenant)
		})
	}
}

// TestForkWhileTemplateDeleted: a fork whose parent and then template are
// deleted after the fork read the parent, before it recorded the child,
// fails with NotFound and records no child.
func TestForkWhileTemplateDeleted(t *testing.T) {
	db, tenant, _ := newTestStore(t)
	parent := stored(t, db, tenant, sandbox.StateRunning)
	snap := store.Snapshot{ID: sandbox.NewSnapshotID(), SandboxID: parent.ID, Tenant: tenant, Kind: store.SnapshotDisk,
		Tier: TierManual, State: store.SnapshotReady, Node: "n1", Runtime: "ns", Template: "minimal"}
	if err := db.CreateSnapshot(t.Context(), snap); err != nil {
		t.Fatal(err)
	}
	deleting := &templateDeletingStore{Store: db, t: t, before: func(ctx context.Context, child *sandbox.Sandbox) error {
		return db.DeleteSandbox(ctx, parent.ID) // the template's last user
	}}
	svc := newIdleService(Config{}, deleting)
	// A child recorded (the regression) would wait to settle: bounded here.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := svc.Fork(ctx, Caller{Tenant: tenant}, parent.ID, ForkParams{Snapshot: snap.ID})
	if deleting.deleted != 1 {
		t.Fatalf("the template was deleted %d times before the insert, want once (err %v)", deleting.deleted, err)
	}
	wantTemplateDeleted(t, db, "fork", err, tenant)
}
